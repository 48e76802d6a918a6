package dlqcli

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// queueArgs wants QUEUE first, then more arguments when more is true.
func queueArgs(more bool) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("QUEUE is required: the name of a DeadLetterQueue (kubectl get dlq lists them)")
		}
		if !more && len(args) > 1 {
			return usagef("unexpected arguments after QUEUE: %s", strings.Join(args[1:], " "))
		}
		return nil
	}
}

// queueError words a failed read of a queue: a missing queue names the namespace it was looked in.
func queueError(err error, queue, namespace string) error {
	if apierrors.IsNotFound(err) {
		return notFound(fmt.Sprintf("deadletterqueues.%s %q in namespace %q not found (kubectl get dlq -n %s lists the queues)",
			retryv1alpha1.GroupVersion.Group, queue, namespace, namespace))
	}
	return err
}

// notFound is a NotFound API error with a message for a person.
func notFound(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Message: msg,
	}}
}

// completeQueues completes QUEUE with the DeadLetterQueues of the namespace.
func completeQueues(o *Options) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeNames(o, resourceQueues)(nil, args, toComplete)
	}
}

// completeNames completes with the names of a retry.retryops.dev resource in the namespace.
func completeNames(o *Options, resource string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := o.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &unstructured.UnstructuredList{}
		// metadata only: the names are all that is needed
		body, err := c.retry.Get().Namespace(c.namespace).Resource(resource).
			SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json").
			Do(context.Background()).Raw()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if err := list.UnmarshalJSON(body); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, it := range list.Items {
			if strings.HasPrefix(it.GetName(), toComplete) {
				names = append(names, it.GetName())
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
