package dlqcli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqui"
)

// newUICommand is kubectl dlq ui: the console of internal/dlqui, on the plugin's clients (the
// kubeconfig flags, the user's identity).
func newUICommand(o *Options) *cobra.Command {
	var address string
	var noBrowser bool
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Open the dead-letter console in your browser",
		Long: `ui starts the dead-letter console, a web server on your machine (like kubectl proxy), and opens
it in your browser. The console shows the namespace's DeadLetterQueues, browses and opens their dead
letters, and replays, resolves, ignores or purges them by creating DeadLetterActions (a dry run first,
to show how many dead letters an action matches), all with your kubeconfig identity and RBAC.

The console listens on a loopback address only and answers only there, under a random path of its
own; the URL printed carries a random token for this session, which your browser trades for a
cookie valid on that path only. The browser is opened on a one-time sign-in page written for you
alone, so the token is on no command line. Anyone who can read the printed URL can act as you until
you stop the console: do not share it.`,
		Example: `  # Open the console for the current namespace
  kubectl dlq ui

  # Another namespace, on a fixed port, without opening a browser
  kubectl dlq ui -n shop --address 127.0.0.1:8001 --no-browser`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			srv, err := dlqui.New(dlqui.Options{Backend: &uiBackend{o: o, c: c}})
			if err != nil {
				return err
			}
			l, err := srv.Listen(address)
			if err != nil {
				return usagef("%v", err)
			}
			u := srv.URL(l.Addr().String())
			fmt.Fprintf(o.streams.Out, "Dead-letter console for namespace %s at %s\nPress Ctrl-C to stop it.\n", c.namespace, u)
			if !noBrowser {
				// the opener's command line, public to every local user, gets a one-time sign-in
				// page of the user's alone, never the URL with the token
				if err := srv.OpenBrowser(l.Addr().String()); err != nil {
					fmt.Fprintf(o.streams.ErrOut, "could not open a browser (%v): open the URL above\n", err)
				}
			}
			return srv.Serve(ctxOf(cmd), l)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "the loopback address and port to listen on (port 0 picks a free one)")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the URL, do not open a browser")
	return cmd
}

// uiBackend is dlqui.Backend on the plugin's clients.
type uiBackend struct {
	o *Options
	c *clients
}

func (b *uiBackend) Namespace() string { return b.c.namespace }

func (b *uiBackend) ListQueues(ctx context.Context) ([]retryv1alpha1.DeadLetterQueue, error) {
	l := &retryv1alpha1.DeadLetterQueueList{}
	err := b.c.retry.Get().Namespace(b.c.namespace).Resource(resourceQueues).Do(ctx).Into(l)
	return l.Items, err
}

func (b *uiBackend) GetQueue(ctx context.Context, name string) (*retryv1alpha1.DeadLetterQueue, error) {
	return b.c.getQueue(ctx, name)
}

// ListLetters lists with the filter's list options (dlqui.Filter.ListOptions, what an action from
// the same filter selects). The API may answer a page it could not fill (a selective list of a
// large queue returns what it found in its time, with a continue token): it is followed, at most
// maxFollow pages, until limit dead letters are read.
func (b *uiBackend) ListLetters(ctx context.Context, queue string, f dlqui.Filter, limit int64, cont string) (*dlv1.DeadLetterList, error) {
	const maxFollow = 10
	opts := f.ListOptions(b.c.namespace, queue)
	opts.Continue = cont
	out := &dlv1.DeadLetterList{}
	for range maxFollow {
		opts.Limit = limit - int64(len(out.Items))
		page, err := b.c.listPage(ctx, opts)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, page.Items...)
		out.Continue, out.RemainingItemCount = page.Continue, page.RemainingItemCount
		if page.Continue == "" || int64(len(out.Items)) >= limit {
			break
		}
		opts.Continue = page.Continue
	}
	return out, nil
}

func (b *uiBackend) GetLetter(ctx context.Context, queue string, partition int32, offset int64) (*dlv1.DeadLetter, error) {
	return b.c.getLetter(ctx, dlv1.Name(queue, partition, offset))
}

func (b *uiBackend) ListActions(ctx context.Context) ([]retryv1alpha1.DeadLetterAction, error) {
	l, err := b.c.listActions(ctx, false)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (b *uiBackend) GetAction(ctx context.Context, name string) (*retryv1alpha1.DeadLetterAction, error) {
	return b.c.getAction(ctx, name)
}

func (b *uiBackend) CreateAction(ctx context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterAction, error) {
	return b.c.createAction(ctx, a)
}

func (b *uiBackend) WhoAmI(ctx context.Context) (string, error) { return b.c.whoAmI(ctx) }
