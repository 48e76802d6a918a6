package dlqui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// actionTypes are the actions the forms offer, by their form value.
var actionTypes = map[string]v1.DeadLetterActionType{
	"replay": v1.DeadLetterReplay, "resolve": v1.DeadLetterResolve, "ignore": v1.DeadLetterIgnore, "purge": v1.DeadLetterPurge,
}

// preview creates the dry run of the action a form asks for, on the dead letters the form's filter
// (or its record) selects, and shows it: the confirmation page says how many it matched before
// anything changes.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
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
	note := strings.TrimSpace(r.PostFormValue("note"))
	if (kind == v1.DeadLetterResolve || kind == v1.DeadLetterIgnore) && note == "" {
		s.fail(w, r, &badRequest{strings.ToLower(string(kind)) + " needs a note: say why"})
		return
	}
	sel := f.Selector(s.backend.Namespace())
	if rec := r.PostFormValue("record"); rec != "" {
		var p, off int64
		if n, err := fmt.Sscanf(rec, "%d/%d", &p, &off); err != nil || n != 2 || p < 0 || off < 0 {
			s.fail(w, r, &badRequest{"record " + strconv.Quote(rec) + ": want PARTITION/OFFSET"})
			return
		}
		sel.Records = []v1.RecordRef{v1.RecordRef(fmt.Sprintf("%d/%d", p, off))}
	}
	if kind == v1.DeadLetterPurge {
		// purge deletes what is older than until, never Pending dead letters
		if sel.Before == nil {
			s.fail(w, r, &badRequest{"purge needs an until time in the filter: only dead letters older than it are deleted"})
			return
		}
		sel.After = nil
		sel.States = slices.DeleteFunc(sel.States, func(st v1.DeadLetterState) bool { return st == v1.DeadLetterPending })
	}
	target, err := replayTarget(kind, r.PostFormValue("to_pipeline"), r.PostFormValue("to_topic"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	user, err := s.backend.WhoAmI(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	spec := v1.DeadLetterActionSpec{Queue: queue, Action: kind, Note: note, RequestedBy: user, Mode: v1.ActionModeDryRun, Target: target}
	if !(actionSelector{sel}).empty() {
		spec.Selector = &sel
	}
	created, err := s.backend.CreateAction(r.Context(), newAction(s.backend.Namespace(), spec))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, s.path("/actions/"+url.PathEscape(created.Name)), http.StatusSeeOther)
}

// replayTarget is a Replay's optional target: a pipeline's first retry tier or a topic, not both.
func replayTarget(kind v1.DeadLetterActionType, pipeline, topic string) (*v1.ReplayTarget, error) {
	pipeline, topic = strings.TrimSpace(pipeline), strings.TrimSpace(topic)
	switch {
	case pipeline == "" && topic == "":
		return nil, nil
	case kind != v1.DeadLetterReplay:
		return nil, &badRequest{"a target applies to replay only"}
	case pipeline != "" && topic != "":
		return nil, &badRequest{"replay to a pipeline or to a topic, not both"}
	case pipeline != "":
		return &v1.ReplayTarget{Pipeline: pipeline}, nil
	default:
		return &v1.ReplayTarget{Topic: v1.TopicName(topic)}, nil
	}
}

type actionSelector struct{ v1.DeadLetterSelector }

func (s actionSelector) empty() bool {
	return len(s.Reasons)+len(s.ErrorTypes)+len(s.Pipelines)+len(s.States)+len(s.Keys)+len(s.Headers)+len(s.Records) == 0 &&
		s.After == nil && s.Before == nil
}

// newAction is an action named like kubectl dlq names them: <action>-<queue>-<random>.
func newAction(namespace string, spec v1.DeadLetterActionSpec) *v1.DeadLetterAction {
	p := strings.ToLower(string(spec.Action)) + "-" + spec.Queue
	if len(p) > 50 {
		p = strings.TrimRight(p[:50], "-.")
	}
	return &v1.DeadLetterAction{ObjectMeta: metav1.ObjectMeta{GenerateName: p + "-", Namespace: namespace}, Spec: spec}
}

// run creates the action a finished dry run previewed, with the same spec, and shows its progress.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	dry, err := s.backend.GetAction(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if dry.Spec.Mode != v1.ActionModeDryRun || dry.Status.Phase != v1.ActionSucceeded {
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
	spec.Mode, spec.RequestedBy = v1.ActionModeRun, user
	created, err := s.backend.CreateAction(r.Context(), newAction(s.backend.Namespace(), spec))
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
	slices.SortFunc(as, func(a, b v1.DeadLetterAction) int {
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
