package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Inputs is everything a pipeline's children are rendered from. The controller fills it after
// fetching the three resources; nothing in it is read from the cluster here.
type Inputs struct {
	// Pipeline is the ConsumerPipeline. Required.
	Pipeline *retryv1alpha1.ConsumerPipeline
	// Policy is the RetryPolicy that spec.retryPolicyRef names. Required.
	Policy *retryv1alpha1.RetryPolicy
	// Compiled, when set, is Policy compiled (policy.Cache), so that rendering does not compile it
	// again; nil compiles Policy.
	Compiled *retry.Compiled
	// DLQ is the DeadLetterQueue that spec.deadLetterQueueRef names. Required.
	DLQ *retryv1alpha1.DeadLetterQueue
	// Tiers are the retry-tier topics (names, delays, attempts) in order, as the controller computes
	// and creates them (config.BuildTiers of the compiled policy's plan with spec.retryTopics.naming).
	// Required when the policy allows a retry (maxAttempts > 1); ignored otherwise.
	Tiers config.Tiers
	// Draining are retry tiers of an earlier policy (or naming) that still hold records the consumer
	// group has not consumed (config topics.draining): the dispatcher consumes them too until the
	// controller drops them. At most config.MaxDrainingTiers; names of a current tier, the source or
	// the dead letter topic are left out. Optional.
	Draining []string
	// DefaultBootstrapServers are the operator-wide default brokers (--kafka-bootstrap-servers), used
	// by a pipeline or DLQ whose spec.kafka names none (and then sets no tls or sasl either).
	DefaultBootstrapServers []string
	// Default is how the pods reach the default connection beyond its brokers: its TLS (CA bundle and
	// server name, which are public) and the identity of the pipeline's namespace (never the
	// operator's credentials). Nil: plaintext without authentication.
	Default *DefaultConnection
	// DispatcherImage is the dispatcher image (--dispatcher-image). Required in sink mode.
	DispatcherImage string
	// DispatcherResources are the dispatcher container's resources in sink mode. Nil means
	// DefaultDispatcherResources.
	DispatcherResources *corev1.ResourceRequirements
	// RuleLabels are extra labels on the PrometheusRule and the alert ConfigMap, such as the label a
	// Prometheus Operator's ruleSelector matches (release: prometheus). Optional.
	RuleLabels map[string]string
	// RunbookBaseURL is the page of the runbooks whose sections the rules' runbook_url annotations
	// point at (--alert-runbook-base-url); empty means DefaultRunbookBaseURL.
	RunbookBaseURL string
	// CircuitReportInterval is how often consumers repeat a circuit breaker report that is not
	// Closed (config circuitReport.interval); zero leaves the dispatcher's default (30s).
	CircuitReportInterval time.Duration
	// Idle is set while a pipeline that may scale to zero (spec.autoscaling.minReplicas 0) has
	// nothing due: its Deployment runs no pod, whatever spec.replicas says (the autoscaler keeps it
	// at 1 at least).
	Idle bool
}

// SpecError is a problem with the resources' specs that only a change to them can fix. The
// controller shows it on a condition (reason InvalidSpec), emits a Warning event and waits for a
// change instead of retrying. Its message never holds a secret.
type SpecError struct {
	// Field is the path of the offending field, such as "spec.template.spec.volumes[2].name".
	Field string
	// Message says what is wrong and what to do.
	Message string
}

// Error returns "<field>: <message>".
func (e *SpecError) Error() string { return e.Field + ": " + e.Message }

func (in *Inputs) check() error {
	switch {
	case in == nil || in.Pipeline == nil:
		return fmt.Errorf("render: Inputs.Pipeline is required")
	case in.Policy == nil:
		return fmt.Errorf("render: Inputs.Policy is required")
	case in.DLQ == nil:
		return fmt.Errorf("render: Inputs.DLQ is required")
	}
	s := &in.Pipeline.Spec
	if (s.Sink == nil) == (s.Template == nil) {
		return &SpecError{Field: "spec", Message: "set exactly one of sink (the operator's dispatcher delivers records to your HTTP endpoint) or template (your own consumer pod)"}
	}
	if s.Sink != nil && (s.Sink.URI == "") == (s.Sink.Ref == nil) {
		return &SpecError{Field: "spec.sink", Message: "set exactly one of sink.uri and sink.ref"}
	}
	return nil
}

// sinkMode reports whether the pipeline is served by the operator's dispatcher.
func (in *Inputs) sinkMode() bool { return in.Pipeline.Spec.Sink != nil }

// Label keys and values.
const (
	// LabelName is app.kubernetes.io/name; every child carries LabelNameValue.
	LabelName = "app.kubernetes.io/name"
	// LabelNameValue is the value of LabelName.
	LabelNameValue = "retry-dispatcher"
	// LabelComponent is app.kubernetes.io/component: consumer, config or alerts.
	LabelComponent = "app.kubernetes.io/component"
	// LabelManagedBy is app.kubernetes.io/managed-by.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelManagedByValue is the value of LabelManagedBy.
	LabelManagedByValue = "retry-operator"
	// LabelPipeline is the name of the ConsumerPipeline a child belongs to: the operator's own
	// instance label. Children never carry app.kubernetes.io/instance, which Argo CD uses to track
	// the objects of its Applications (an Application syncing a pipeline would take the children for
	// its own, flag them out of sync or prune them).
	LabelPipeline = "retry.retryops.dev/pipeline"
	// LabelDeadLetterQueue is the name of the DeadLetterQueue an alert object belongs to.
	LabelDeadLetterQueue = "retry.retryops.dev/deadletterqueue"
	// LabelAlertRules marks the ConfigMaps that hold a Prometheus rule file ("true"), for a rule
	// loader that selects ConfigMaps by label.
	LabelAlertRules = "retry.retryops.dev/alert-rules"
	// AnnotationConfigHash on the pod template is ConfigHash of the pipeline's ConfigMap.
	AnnotationConfigHash = "retry.retryops.dev/config-hash"
	// AnnotationSecrets on the ConfigMap lists the Secrets (and keys) the pods mount, by role:
	// "kafka.sasl=kafka-user/username,password;...". Names only, never values.
	AnnotationSecrets = "retry.retryops.dev/secrets"
)

// Object names.

// DeploymentName is the name of the pipeline's consumer Deployment: <pipeline>-dispatcher (in both
// modes, so that switching between sink and template updates one Deployment in place).
func DeploymentName(p *retryv1alpha1.ConsumerPipeline) string {
	return childName(p.Name, "-dispatcher")
}

// ConfigMapName is the name of the pipeline's config ConfigMap: <pipeline>-dispatcher-config.
func ConfigMapName(p *retryv1alpha1.ConsumerPipeline) string {
	return childName(p.Name, "-dispatcher-config")
}

// CircuitConfigMapName is the name of the ConfigMap the pipeline's consumers report their circuit
// breakers' state in: <pipeline>-dispatcher-circuit (see sdk/circuitstate).
func CircuitConfigMapName(p *retryv1alpha1.ConsumerPipeline) string {
	return childName(p.Name, "-dispatcher-circuit")
}

// ServiceAccountName is the name of the ServiceAccount of the pipeline's consumers, and of the Role
// and RoleBinding that let them write their circuit reports: <pipeline>-dispatcher.
func ServiceAccountName(p *retryv1alpha1.ConsumerPipeline) string {
	return childName(p.Name, "-dispatcher")
}

// PipelineAlertsName is the name of the pipeline's PrometheusRule or alert ConfigMap:
// <pipeline>-pipeline-alerts.
func PipelineAlertsName(p *retryv1alpha1.ConsumerPipeline) string {
	return childName(p.Name, "-pipeline-alerts")
}

// DeadLetterQueueAlertsName is the name of a DeadLetterQueue's PrometheusRule or alert ConfigMap:
// <dlq>-dlq-alerts.
func DeadLetterQueueAlertsName(d *retryv1alpha1.DeadLetterQueue) string {
	return childName(d.Name, "-dlq-alerts")
}

// maxNameLength is the longest object name (a DNS subdomain).
const maxNameLength = 253

// childName appends suffix to name, shortening name with a hash when the result would be too long.
func childName(name, suffix string) string {
	return shorten(name, maxNameLength-len(suffix)) + suffix
}

// labelValue makes name a valid label value (at most 63 characters), shortening it with a hash.
func labelValue(name string) string { return shorten(name, 63) }

// shorten returns s when it fits in n characters, otherwise a prefix of s, "-" and 10 hex digits of
// its hash, n characters in all. The prefix is trimmed of trailing dots and dashes.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:10]
	prefix := s[:n-len(h)-1]
	for len(prefix) > 0 && (prefix[len(prefix)-1] == '-' || prefix[len(prefix)-1] == '.') {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + "-" + h
}

// SelectorLabels are the Deployment's selector: only the operator's own retry.retryops.dev/pipeline
// label, so that it is stable for the pipeline's life (a Deployment's selector is immutable), the
// same in sink and template mode, and never clashes with a label of the user's pod template.
func SelectorLabels(p *retryv1alpha1.ConsumerPipeline) map[string]string {
	return map[string]string{LabelPipeline: labelValue(p.Name)}
}

// pipelineLabels are the labels of every child of p: managed-by is what the manager's cache selects
// (controllers.CacheOptions), the pipeline label the operator's own instance label.
func pipelineLabels(p *retryv1alpha1.ConsumerPipeline, component string) map[string]string {
	return map[string]string{
		LabelName:      LabelNameValue,
		LabelManagedBy: LabelManagedByValue,
		LabelPipeline:  labelValue(p.Name),
		LabelComponent: component,
	}
}

// Defaults applied when the resources leave a field unset (objects built in Go skip API defaulting).
const (
	DefaultReplicas           = 1
	DefaultMaxConsumerLag     = 1000
	DefaultMaxRetryBacklog    = 1000
	DefaultPipelineAlertFor   = 5 * time.Minute
	DefaultDLQMaxMessages     = 500
	DefaultDLQMaxMessagesFor  = time.Hour
	DefaultDLQMaxGrowthPerMin = 12
	DefaultDLQMaxGrowthFor    = 10 * time.Minute
	DefaultDLQMaxOldestAge    = 24 * time.Hour
	DefaultSinkPort           = 80
	DefaultSinkPath           = "/"
	defaultCAKey              = "ca.crt"
)

// Replicas is the pipeline's wanted number of consumer pods: spec.replicas or DefaultReplicas.
func Replicas(p *retryv1alpha1.ConsumerPipeline) int32 {
	if p.Spec.Replicas == nil {
		return DefaultReplicas
	}
	return *p.Spec.Replicas
}

// consumerGroup is spec.source.consumerGroup or its default <namespace>.<name>.
func consumerGroup(p *retryv1alpha1.ConsumerPipeline) string {
	if g := p.Spec.Source.ConsumerGroup; g != "" {
		return g
	}
	return p.Namespace + "." + p.Name
}

// SinkURL is the URL the dispatcher POSTs records to: sink.uri, or
// http://<service>.<namespace>.svc:<port><path> for sink.ref. Empty in template mode.
func SinkURL(p *retryv1alpha1.ConsumerPipeline) string {
	s := p.Spec.Sink
	switch {
	case s == nil:
		return ""
	case s.URI != "":
		return s.URI
	case s.Ref == nil:
		return ""
	}
	port := s.Ref.Port
	if port == 0 {
		port = DefaultSinkPort
	}
	path := s.Ref.Path
	if path == "" {
		path = DefaultSinkPath
	}
	return "http://" + s.Ref.Name + "." + p.Namespace + ".svc:" + strconv.Itoa(int(port)) + path
}

// DefaultConnection is the default connection as the pods of a pipeline on it see it.
type DefaultConnection struct {
	// TLS is set when the default connection uses TLS.
	TLS bool
	// CAPEM is the CA bundle that signs the brokers' certificates; empty means the system roots. It
	// goes into the pipeline's ConfigMap under CAKey.
	CAPEM []byte
	// ServerName is the name checked in the brokers' certificates; empty means the host dialed.
	ServerName string
	// SASLMechanism is the default connection's SASL mechanism; empty means no SASL.
	SASLMechanism retryv1alpha1.SASLMechanism
	// ClientCert is set when the default connection authenticates with a TLS client certificate.
	ClientCert bool
	// Identity is the consumer Secret of the pipeline's namespace; required with SASLMechanism or
	// ClientCert.
	Identity *ConsumerIdentity
}

// ConsumerIdentity is a consumer Secret and the keys mounted from it (kafkaspec.ConsumerIdentity).
type ConsumerIdentity struct {
	// Secret is the Secret's name in the pipeline's namespace.
	Secret string
	// UsernameKey holds the SASL user; when empty, Username is the user.
	UsernameKey string
	// Username is the SASL user when the Secret has no key for it.
	Username string
	// PasswordKey holds the SASL password.
	PasswordKey string
	// CertKey and KeyKey hold the client certificate and its key.
	CertKey, KeyKey string
}

// connection is a Kafka connection as the pods see it: brokers plus the Secrets to mount. def is
// set for the default connection, whose TLS and identity come from Inputs.Default.
type connection struct {
	servers []string
	tls     *retryv1alpha1.KafkaTLS
	sasl    *retryv1alpha1.KafkaSASL
	def     bool
}

// resolve applies the operator-wide default brokers to spec, the way the controllers do: a spec that
// names brokers keeps exactly its own TLS and SASL; one that names none uses the default connection
// whole, so it may set neither tls nor sasl (a SpecError on field, for objects stored before the
// CRD's rule said so). SASL PLAIN without TLS is a SpecError unless plaintextPassword is Allow.
func resolve(spec *retryv1alpha1.KafkaConnection, defaults []string, field string) (connection, error) {
	c := connection{servers: defaults, def: true}
	if spec == nil {
		return c, nil
	}
	if len(spec.BootstrapServers) == 0 {
		if spec.TLS != nil || spec.SASL != nil {
			return c, &SpecError{Field: field, Message: "tls and sasl apply only with bootstrapServers: " +
				"without them the operator's default connection (its servers, TLS and SASL) is used whole; set bootstrapServers too, or remove tls and sasl"}
		}
		return c, nil
	}
	c.servers, c.tls, c.sasl, c.def = spec.BootstrapServers, spec.TLS, spec.SASL, false
	if s := spec.SASL; s != nil && s.Mechanism == retryv1alpha1.SASLPlain && spec.TLS == nil && s.PlaintextPassword != retryv1alpha1.PlaintextPasswordAllow {
		return c, &SpecError{Field: field + ".sasl", Message: "SASL PLAIN without TLS would send the password in clear text: " +
			"set tls, use SCRAM-SHA-256 or SCRAM-SHA-512, or set sasl.plaintextPassword: Allow"}
	}
	return c, nil
}

func (c connection) equal(o connection) bool {
	return c.def == o.def && slices.Equal(c.servers, o.servers) && equalTLS(c.tls, o.tls) && equalSASL(c.sasl, o.sasl)
}

func equalTLS(a, b *retryv1alpha1.KafkaTLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return caKey(a) == caKey(b) && secretName(a.ClientCertSecretRef) == secretName(b.ClientCertSecretRef) && a.ServerName == b.ServerName
}

func equalSASL(a, b *retryv1alpha1.KafkaSASL) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// caKey identifies a CA reference as "<secret>/<key>", or "" without one.
func caKey(t *retryv1alpha1.KafkaTLS) string {
	if t == nil || t.CASecretRef == nil {
		return ""
	}
	key := t.CASecretRef.Key
	if key == "" {
		key = defaultCAKey
	}
	return t.CASecretRef.Name + "/" + key
}

func secretName(r *retryv1alpha1.SecretReference) string {
	if r == nil {
		return ""
	}
	return r.Name
}

// connections returns the source connection and, when the DLQ lives elsewhere, its connection.
func (in *Inputs) connections() (source connection, dlq *connection, err error) {
	source, err = resolve(in.Pipeline.Spec.Kafka, in.DefaultBootstrapServers, "spec.kafka")
	if err != nil {
		return source, nil, err
	}
	if len(source.servers) == 0 {
		return source, nil, &SpecError{Field: "spec.kafka.bootstrapServers", Message: "no Kafka bootstrap servers: set spec.kafka.bootstrapServers or start the manager with --kafka-bootstrap-servers"}
	}
	dlqField := "DeadLetterQueue " + in.DLQ.Name + " spec.kafka"
	d, err := resolve(in.DLQ.Spec.Kafka, in.DefaultBootstrapServers, dlqField)
	if err != nil {
		return source, nil, err
	}
	if len(d.servers) == 0 {
		return source, nil, &SpecError{Field: dlqField + ".bootstrapServers", Message: "no Kafka bootstrap servers: set spec.kafka.bootstrapServers or start the manager with --kafka-bootstrap-servers"}
	}
	if d.equal(source) {
		return source, nil, nil
	}
	return source, &d, nil
}
