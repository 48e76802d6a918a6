package dlqui

import (
	"context"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Backend is every Kubernetes call the console makes, all under the user's kubeconfig identity:
// reads through the deadletters API and the DeadLetterQueue and DeadLetterAction CRDs, and one
// kind of change, creating a DeadLetterAction. kubectl dlq ui implements it with the plugin's
// clients (internal/dlqcli); the tests with an in-memory fake.
type Backend interface {
	// Namespace is the namespace every call is made in (the kubeconfig's, or --namespace).
	Namespace() string
	// ListQueues lists the namespace's DeadLetterQueues.
	ListQueues(ctx context.Context) ([]retryv1alpha1.DeadLetterQueue, error)
	// GetQueue reads one DeadLetterQueue.
	GetQueue(ctx context.Context, name string) (*retryv1alpha1.DeadLetterQueue, error)
	// ListLetters reads one page of a queue's dead letters matching f: at most limit, from the
	// continue token cont ("" for the first page); the list's Continue resumes after it.
	ListLetters(ctx context.Context, queue string, f Filter, limit int64, cont string) (*dlv1.DeadLetterList, error)
	// GetLetter reads one dead letter, its value whole.
	GetLetter(ctx context.Context, queue string, partition int32, offset int64) (*dlv1.DeadLetter, error)
	// ListActions lists the namespace's DeadLetterActions.
	ListActions(ctx context.Context) ([]retryv1alpha1.DeadLetterAction, error)
	// GetAction reads one DeadLetterAction.
	GetAction(ctx context.Context, name string) (*retryv1alpha1.DeadLetterAction, error)
	// CreateAction creates a DeadLetterAction (the console's only change).
	CreateAction(ctx context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterAction, error)
	// WhoAmI is the user's name as the API server sees it (SelfSubjectReview): every action's
	// requestedBy.
	WhoAmI(ctx context.Context) (string, error)
}
