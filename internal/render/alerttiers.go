package render

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The third tier is severity critical plus the label escalation=engineering-lead, not a severity of
// its own: Alertmanager configurations (kube-prometheus' among them) route on severity critical,
// warning or info, so an unknown "severity: page" would fall to the default receiver or be dropped by
// a severity=~"warning|critical" matcher, losing the most urgent alert. As it is, the escalation pages
// wherever a critical alert pages, and a route matching escalation="engineering-lead" (continue: true)
// adds the engineering lead.
const (
	// LabelEscalation is the label of the third tier's alerts.
	LabelEscalation = "escalation"
	// EscalationEngineeringLead is its value: the engineering lead coordinates the response (seed 003,
	// tier 4).
	EscalationEngineeringLead = "engineering-lead"
)

// Alert names of the third tier.
const (
	AlertDeadLetterQueueSizeEscalation          = "DeadLetterQueueSizeEscalation"
	AlertDeadLetterQueueOldestMessageEscalation = "DeadLetterQueueOldestMessageEscalation"
)

// OldestMessageEscalationFor is how long the oldest pending dead letter must stay past
// escalateOldestAge before DeadLetterQueueOldestMessageEscalation fires: a letter a week old is not
// made more urgent by an hour, and a purge or replay under way gets that hour to finish.
const OldestMessageEscalationFor = time.Hour

// Defaults of the third tier (seed 003: more than 1000 failed or stuck for more than 7 days).
const (
	DefaultDLQEscalateMessages  = 1000
	DefaultDLQEscalateOldestAge = 7 * 24 * time.Hour
)

// AlertTier is an alert's place in the escalation tiers of seed 003: warning (the platform team
// looks within business hours), critical (the owning service team responds within the hour),
// critical with Escalation set (the engineering lead coordinates).
type AlertTier struct {
	// Alert is the alert name, and the heading of its section in docs/runbooks.md.
	Alert string
	// Severity is the severity label: SeverityWarning or SeverityCritical.
	Severity string
	// Escalation is the escalation label's value, or empty for none.
	Escalation string
}

// AlertTiers are every alert the operator renders, with its tier; the rules take their labels from
// here and docs/runbooks.md has one section per entry.
var AlertTiers = []AlertTier{
	{Alert: AlertConsumerLagHigh, Severity: SeverityWarning},
	{Alert: AlertRetryBacklogHigh, Severity: SeverityWarning},
	{Alert: AlertCircuitOpen, Severity: SeverityWarning},
	{Alert: AlertDispatcherDown, Severity: SeverityCritical},
	{Alert: AlertDeadLettersStuck, Severity: SeverityCritical},
	{Alert: AlertDeadLetterQueueSize, Severity: SeverityWarning},
	{Alert: AlertDeadLetterQueueGrowth, Severity: SeverityCritical},
	{Alert: AlertDeadLetterQueueOldestMessage, Severity: SeverityWarning},
	{Alert: AlertDeadLetterQueueSizeEscalation, Severity: SeverityCritical, Escalation: EscalationEngineeringLead},
	{Alert: AlertDeadLetterQueueOldestMessageEscalation, Severity: SeverityCritical, Escalation: EscalationEngineeringLead},
}

// tierLabels are the tier labels of alert; an alert missing from AlertTiers is a programming error.
func tierLabels(alert string) map[string]string {
	for _, t := range AlertTiers {
		if t.Alert == alert {
			l := map[string]string{"severity": t.Severity}
			if t.Escalation != "" {
				l[LabelEscalation] = t.Escalation
			}
			return l
		}
	}
	panic("render: alert " + alert + " has no tier in AlertTiers")
}

// DefaultRunbookBaseURL is where the runbooks are published: the project's docs/runbooks.md.
const DefaultRunbookBaseURL = "https://github.com/retryops/retry-operator/blob/main/docs/runbooks.md"

// RunbookURL is the runbook_url of alert: base (DefaultRunbookBaseURL when empty) with the anchor
// GitHub gives the heading "## <alert>", its name in lower case.
func RunbookURL(base, alert string) string {
	if base == "" {
		base = DefaultRunbookBaseURL
	}
	return base + "#" + strings.ToLower(alert)
}

// ValidRunbookBaseURL checks a runbook base URL: absolute http or https, without a fragment (the
// alert's anchor is appended).
func ValidRunbookBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("runbook base URL %q: must be an absolute http or https URL", s)
	case strings.Contains(s, "#"):
		return fmt.Errorf("runbook base URL %q: must have no #fragment: each alert's anchor is appended", s)
	}
	return nil
}

// annotate adds the runbook_url annotation of rule r to its annotations and its tier labels to its
// labels, and returns it.
func annotate(base string, r Rule) Rule {
	for k, v := range tierLabels(r.Alert) {
		r.Labels[k] = v
	}
	r.Annotations["runbook_url"] = RunbookURL(base, r.Alert)
	return r
}
