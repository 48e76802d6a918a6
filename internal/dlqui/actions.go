package dlqui

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// actionTypes are the actions the forms offer, by their form value.
var actionTypes = map[string]retryv1alpha1.DeadLetterActionType{
	"replay": retryv1alpha1.DeadLetterReplay, "resolve": retryv1alpha1.DeadLetterResolve, "ignore": retryv1alpha1.DeadLetterIgnore, "purge": retryv1alpha1.DeadLetterPurge,
}

// preview creates the dry run of the action a form asks for, on the dead letters the form's filter
// (or its record) selects, and shows it: the confirmation page says how many it matched before
// anything changes.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	kind, ok := actionTypes[r.PostFormValue("action")]
	if !ok {
		s.fail(w, r, &badRequest{"action " + strconv.Quote(r.PostFormValue("action")) + ": want replay, resolve, ignore or purge"})
		return
	}
	f, _, err := parseFilter(r.PostForm)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req := ActionRequest{Kind: kind, Queue: r.PathValue("queue"), Filter: f, Note: r.PostFormValue("note"), DryRun: true,
		Target: replayTarget(r.PostFormValue("to_pipeline"), r.PostFormValue("to_topic"))}
	if rec := r.PostFormValue("record"); rec != "" {
		ref, err := ParseRecord(rec)
		if err != nil {
			s.fail(w, r, &badRequest{err.Error()})
			return
		}
		req.Records = []Record{ref}
	}
	if err := req.Check(); err != nil {
		s.fail(w, r, &badRequest{formMessage(err)})
		return
	}
	user, err := s.backend.WhoAmI(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	a, err := req.Build(s.backend.Namespace(), user)
	if err != nil {
		s.fail(w, r, &badRequest{formMessage(err)})
		return
	}
	created, err := s.backend.CreateAction(r.Context(), a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, s.path("/actions/"+url.PathEscape(created.Name)), http.StatusSeeOther)
}

// formMessage is Build's refusal in the words of the queue page's filter.
func formMessage(err error) string {
	switch {
	case errors.Is(err, ErrPurgeWithoutBefore):
		return "purge needs an until time in the filter: only dead letters older than it are deleted"
	case errors.Is(err, ErrPurgeSince):
		return "purge deletes every matching dead letter older than until: clear since in the filter"
	case errors.Is(err, ErrPurgePending):
		return "purge never deletes Pending dead letters: choose Resolved, Ignored or Replayed (or any) as the filter's state"
	}
	return err.Error()
}

// replayTarget is the target the form names, if any (ActionRequest.Build checks it).
func replayTarget(pipeline, topic string) *retryv1alpha1.ReplayTarget {
	pipeline, topic = strings.TrimSpace(pipeline), strings.TrimSpace(topic)
	if pipeline == "" && topic == "" {
		return nil
	}
	return &retryv1alpha1.ReplayTarget{Pipeline: pipeline, Topic: retryv1alpha1.TopicName(topic)}
}

// run creates the action a finished dry run previewed, with the same spec, and shows its progress.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	dry, err := s.backend.GetAction(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if dry.Spec.Mode != retryv1alpha1.ActionModeDryRun || dry.Status.Phase != retryv1alpha1.ActionSucceeded {
		s.fail(w, r, &badRequest{"only a dry run that succeeded can be confirmed: " + dry.Name + " is " + string(dry.Spec.Mode) + ", " + string(dry.Status.Phase)})
		return
	}
	// the form names the dry run the page showed: one of the same name created since (deleted and
	// created again by whoever may do that in the namespace) is not what was confirmed
	if uid := r.PostFormValue("uid"); uid == "" || uid != string(dry.UID) {
		s.fail(w, r, &badRequest{"the dry run " + dry.Name + " was replaced since the page showed it: preview the action again"})
		return
	}
	user, err := s.backend.WhoAmI(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	spec := *dry.Spec.DeepCopy()
	spec.Mode, spec.RequestedBy = retryv1alpha1.ActionModeRun, user
	created, err := s.backend.CreateAction(r.Context(), NewAction(s.backend.Namespace(), spec))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, s.path("/actions/"+url.PathEscape(created.Name)), http.StatusSeeOther)
}

type actionsData struct {
	Actions []actionView
	// Polling is set while one runs: the page refreshes itself.
	Polling bool
}

func (s *Server) actions(w http.ResponseWriter, r *http.Request) {
	as, err := s.backend.ListActions(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	slices.SortFunc(as, func(a, b retryv1alpha1.DeadLetterAction) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	d := actionsData{}
	for i := range as {
		v := newActionView(&as[i])
		d.Actions = append(d.Actions, v)
		d.Polling = d.Polling || !v.Finished
	}
	s.render(w, r, http.StatusOK, "actions", "Actions", "actions", d)
}

type actionData struct {
	View actionView
	// UID is the action's, which the confirm form carries (run checks it).
	UID      string
	Verb     string
	DoneWord string
	Back     string
	Letter   string
}

func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	a, err := s.backend.GetAction(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := newActionView(a)
	d := actionData{View: v, UID: string(a.UID), Verb: strings.ToLower(v.Action), Back: s.path("/queues/" + url.PathEscape(v.Queue)),
		DoneWord: map[string]string{"Replay": "replayed", "Resolve": "resolved", "Ignore": "ignored", "Purge": "deleted"}[v.Action]}
	if sel := a.Spec.Selector; sel != nil && len(sel.Records) == 1 {
		d.Letter = s.path("/queues/" + url.PathEscape(v.Queue) + "/letters/" + string(sel.Records[0]))
	}
	title := v.Action + " " + v.Name
	if v.DryRun {
		title = "Confirm: " + strings.ToLower(v.Action) + " on " + v.Queue
	}
	s.render(w, r, http.StatusOK, "action", title, "actions", d)
}

// actionJSON is an action's progress for the pages that poll it.
func (s *Server) actionJSON(w http.ResponseWriter, r *http.Request) {
	a, err := s.backend.GetAction(r.Context(), r.PathValue("name"))
	if err != nil {
		code := http.StatusBadGateway
		var st interface{ Status() metav1.Status }
		if ok := asStatus(err, &st); ok {
			code = int(st.Status().Code)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(newActionView(a))
}
