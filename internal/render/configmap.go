package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/sdk/config"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Paths in the consumer pods.
const (
	// ConfigDir is where the ConfigMap is mounted (read-only; only ConfigKey is projected).
	ConfigDir = "/etc/retryops"
	// ConfigKey is the ConfigMap key holding the dispatcher config as JSON.
	ConfigKey = "config.json"
	// ConfigFile is the config file's path, the value of RETRYOPS_CONFIG.
	ConfigFile = ConfigDir + "/" + ConfigKey
	// SecretsDir holds the mounted Secrets: <SecretsDir>/kafka/{ca,client-cert,sasl}/ for the source
	// connection and <SecretsDir>/dead-letter-kafka/... for a DLQ on its own connection.
	SecretsDir = "/var/run/secrets/retryops"
	// CAKey is the ConfigMap key holding the default connection's CA bundle, projected next to the
	// config when a connection of the pipeline is the default one with a CA.
	CAKey = "kafka-ca.crt"
	// ConfigVolume is the name of the ConfigMap's volume. Every volume the operator adds is named
	// retryops-*, so it never clashes with a volume of the user's template.
	ConfigVolume = "retryops-config"
)

// secretMount is one Secret volume and what the config expects in it.
type secretMount struct {
	role   string // "kafka.tls.ca": for AnnotationSecrets and error messages
	volume string
	dir    string
	secret string
	items  []corev1.KeyToPath
}

// kafkaConfig renders a connection with its Secrets as file paths. scope is "kafka" or
// "dead-letter-kafka"; volumes of the latter are named retryops-dlq-kafka-*. The default connection
// takes its TLS and identity from d.
func kafkaConfig(c connection, d *DefaultConnection, scope string) (config.Kafka, []secretMount, error) {
	k := config.Kafka{BootstrapServers: slices.Clone(c.servers), ClientID: config.DefaultClientID}
	volPrefix := "retryops-kafka-"
	if scope != "kafka" {
		volPrefix = "retryops-dlq-kafka-"
	}
	var mounts []secretMount
	add := func(kind, secret string, items ...corev1.KeyToPath) string {
		m := secretMount{
			role:   scope + "." + kind,
			volume: volPrefix + kind,
			dir:    path.Join(SecretsDir, scope, kind),
			secret: secret,
			items:  items,
		}
		mounts = append(mounts, m)
		return m.dir
	}
	if c.def {
		err := defaultConfig(&k, d, add)
		return k, mounts, err
	}
	if t := c.tls; t != nil {
		k.TLS = &config.TLS{ServerName: t.ServerName}
		if ref := t.CASecretRef; ref != nil {
			key := ref.Key
			if key == "" {
				key = defaultCAKey
			}
			dir := add("ca", ref.Name, corev1.KeyToPath{Key: key, Path: defaultCAKey})
			k.TLS.CAFile = path.Join(dir, defaultCAKey)
		}
		if ref := t.ClientCertSecretRef; ref != nil {
			dir := add("client-cert", ref.Name,
				corev1.KeyToPath{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey},
				corev1.KeyToPath{Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey})
			k.TLS.CertFile = path.Join(dir, corev1.TLSCertKey)
			k.TLS.KeyFile = path.Join(dir, corev1.TLSPrivateKeyKey)
		}
	}
	if s := c.sasl; s != nil {
		dir := add("sasl", s.SecretRef.Name,
			corev1.KeyToPath{Key: "username", Path: "username"},
			corev1.KeyToPath{Key: "password", Path: "password"})
		k.SASL = &config.SASL{
			Mechanism:    config.SASLMechanism(s.Mechanism),
			UsernameFile: path.Join(dir, "username"),
			PasswordFile: path.Join(dir, "password"),
		}
	}
	return k, mounts, nil
}

// defaultConfig renders the default connection's TLS (the CA from the ConfigMap, the server name)
// and the namespace's identity (its Secret's keys mounted under the names the config expects).
func defaultConfig(k *config.Kafka, d *DefaultConnection, add func(kind, secret string, items ...corev1.KeyToPath) string) error {
	if d == nil {
		return nil
	}
	if d.TLS {
		k.TLS = &config.TLS{ServerName: d.ServerName}
		if len(d.CAPEM) > 0 {
			k.TLS.CAFile = path.Join(ConfigDir, CAKey)
		}
	}
	id := d.Identity
	if (d.ClientCert || d.SASLMechanism != "") && id == nil {
		return fmt.Errorf("render: Inputs.Default.Identity is required: the default connection authenticates")
	}
	if d.ClientCert {
		if k.TLS == nil {
			k.TLS = &config.TLS{ServerName: d.ServerName}
		}
		dir := add("client-cert", id.Secret,
			corev1.KeyToPath{Key: id.CertKey, Path: corev1.TLSCertKey},
			corev1.KeyToPath{Key: id.KeyKey, Path: corev1.TLSPrivateKeyKey})
		k.TLS.CertFile = path.Join(dir, corev1.TLSCertKey)
		k.TLS.KeyFile = path.Join(dir, corev1.TLSPrivateKeyKey)
	}
	if d.SASLMechanism != "" {
		items := []corev1.KeyToPath{{Key: id.PasswordKey, Path: "password"}}
		if id.UsernameKey != "" {
			items = append(items, corev1.KeyToPath{Key: id.UsernameKey, Path: "username"})
		}
		dir := add("sasl", id.Secret, items...)
		k.SASL = &config.SASL{Mechanism: config.SASLMechanism(d.SASLMechanism), PasswordFile: path.Join(dir, "password")}
		if id.UsernameKey != "" {
			k.SASL.UsernameFile = path.Join(dir, "username")
		} else {
			k.SASL.Username = id.Username
		}
	}
	return nil
}

// rendered is the config, the Secret volumes it needs, and the default connection's CA bundle when
// a connection of the pipeline is the default one with a CA (ConfigMap key CAKey).
type rendered struct {
	cfg    *config.Config
	mounts []secretMount
	ca     []byte
}

func (in *Inputs) render() (*rendered, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	p := in.Pipeline
	source, dlqConn, err := in.connections()
	if err != nil {
		return nil, err
	}
	spec := policy.Spec(in.Policy.Spec)
	comp, err := in.compile()
	if err != nil {
		return nil, err
	}
	c := &config.Config{
		// The version the linked sdk reads: a consumer built with an older minor refuses the file
		// only if it uses a field that consumer does not know.
		Version:       config.Version,
		Pipeline:      config.Pipeline{Namespace: p.Namespace, Name: p.Name},
		ConsumerGroup: consumerGroup(p),
		Topics: config.Topics{
			Source:     string(p.Spec.Source.Topic),
			DeadLetter: string(in.DLQ.Spec.Topic.Name),
		},
		Policy: &spec,
	}
	if comp.MaxAttempts() > 1 {
		if len(in.Tiers) == 0 {
			return nil, fmt.Errorf("render: Inputs.Tiers is required: RetryPolicy %s allows %d deliveries", in.Policy.Name, comp.MaxAttempts())
		}
		c.Topics.Retries = slices.Clone(in.Tiers)
		for i := range c.Topics.Retries {
			c.Topics.Retries[i].Attempts = slices.Clone(in.Tiers[i].Attempts)
		}
	}
	if c.Topics.Draining, err = in.draining(c); err != nil {
		return nil, err
	}
	var mounts []secretMount
	if c.Kafka, mounts, err = kafkaConfig(source, in.Default, "kafka"); err != nil {
		return nil, err
	}
	if dlqConn != nil {
		k, m, err := kafkaConfig(*dlqConn, in.Default, "dead-letter-kafka")
		if err != nil {
			return nil, err
		}
		c.DeadLetterKafka = &k
		mounts = append(mounts, m...)
	}
	var ca []byte
	if d := in.Default; d != nil && d.TLS && (source.def || (dlqConn != nil && dlqConn.def)) {
		ca = d.CAPEM
	}
	if url := SinkURL(p); url != "" {
		c.Sink = &config.Sink{URL: url}
	}
	if d := p.Spec.Delivery; d != nil {
		c.Delivery.Ordering = config.DeliveryOrdering(d.Ordering)
		if d.MaxInFlight != nil {
			c.Delivery.MaxInFlight = *d.MaxInFlight
		}
		if b := d.Batch; b != nil {
			c.Delivery.Batch = &config.Batch{}
			if b.MaxWait != nil {
				c.Delivery.Batch.MaxWait = sdkpolicy.PD(b.MaxWait.Duration)
			}
			if b.MaxRecords != nil {
				c.Delivery.Batch.MaxRecords = *b.MaxRecords
			}
			if b.MaxBytes != nil {
				// Value rounds a fractional quantity up to whole bytes.
				c.Delivery.Batch.MaxBytes = b.MaxBytes.Value()
			}
		}
	}
	// Every pipeline's consumers report: their circuit breaker when the policy has one, and Kafka
	// refusing them (authentication, TLS, ACLs) in any case.
	c.CircuitReport = &config.CircuitReport{ConfigMap: CircuitConfigMapName(p)}
	if in.CircuitReportInterval > 0 {
		c.CircuitReport.Interval = sdkpolicy.PD(in.CircuitReportInterval)
	}
	c.Default()
	return &rendered{cfg: c, mounts: mounts, ca: ca}, nil
}

// draining is topics.draining: Inputs.Draining sorted, without duplicates and without the names the
// dispatcher consumes anyway (the source, a current tier) or must never consume (a topic named as the
// dead letter topic, even when that one is on another cluster). More than config.MaxDrainingTiers
// is the caller's mistake (the controller bounds the list and reports the rest).
func (in *Inputs) draining(c *config.Config) ([]string, error) {
	skip := map[string]bool{c.Topics.Source: true, c.Topics.DeadLetter: true}
	for _, t := range c.Topics.Retries {
		skip[t.Name] = true
	}
	var out []string
	for _, name := range in.Draining {
		if name != "" && !skip[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > config.MaxDrainingTiers {
		return nil, fmt.Errorf("render: Inputs.Draining lists %d tiers; at most %d", len(out), config.MaxDrainingTiers)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// compile compiles the policy; an invalid one is a *SpecError.
func (in *Inputs) compile() (*retry.Compiled, error) {
	if in.Compiled != nil {
		return in.Compiled, nil
	}
	comp, err := retry.Compile(policy.FromSpec(in.Policy.Spec))
	if err != nil {
		return nil, &SpecError{Field: "RetryPolicy " + in.Policy.Name + " spec", Message: err.Error()}
	}
	return comp, nil
}

// Config returns the dispatcher config of the pipeline: the file [ConfigMap] holds.
func Config(in *Inputs) (*config.Config, error) {
	r, err := in.render()
	if err != nil {
		return nil, err
	}
	return r.cfg, nil
}

// seedEnv returns the seed-style environment variables of c, in config.EnvVars order, without
// RETRYOPS_CONFIG and SINK_URL (the library mode has no sink) and without empty values.
func seedEnv(c *config.Config) []corev1.EnvVar {
	seconds := func(d sdkpolicy.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	vals := map[string]string{
		config.EnvBootstrapServers: strings.Join(c.Kafka.BootstrapServers, ","),
		config.EnvTopicPrimary:     c.Topics.Source,
		config.EnvTopicRetry:       strings.Join(c.Topics.Retries.Names(), ","),
		config.EnvTopicDLQ:         c.Topics.DeadLetter,
		config.EnvConsumerGroup:    c.ConsumerGroup,
		config.EnvMaxAttempts:      strconv.Itoa(int(c.Policy.MaxAttempts)),
		config.EnvBaseDelaySeconds: seconds(c.Policy.Backoff.InitialDelay),
		config.EnvMaxDelaySeconds:  seconds(c.Policy.Backoff.MaxDelay),
	}
	var out []corev1.EnvVar
	for _, name := range config.EnvVars {
		if v := vals[name]; v != "" {
			out = append(out, corev1.EnvVar{Name: name, Value: v})
		}
	}
	return out
}

// ConfigMap renders the pipeline's ConfigMap: the complete dispatcher config as JSON under ConfigKey,
// and each seed-style environment variable (KAFKA_BOOTSTRAP_SERVERS, KAFKA_TOPIC_PRIMARY, ...,
// RETRY_MAX_DELAY_SECONDS) under its own name, which template-mode pods read through
// configMapKeyRef. Secrets appear only as mounted file paths, and their names in the
// AnnotationSecrets annotation.
func ConfigMap(in *Inputs) (*corev1.ConfigMap, error) {
	r, err := in.render()
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(r.cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render: encoding the dispatcher config: %w", err)
	}
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ConfigMapName(in.Pipeline),
			Namespace: in.Pipeline.Namespace,
			Labels:    pipelineLabels(in.Pipeline, "config"),
		},
		Data: map[string]string{ConfigKey: string(data) + "\n"},
	}
	for _, e := range seedEnv(r.cfg) {
		cm.Data[e.Name] = e.Value
	}
	if len(r.ca) > 0 {
		cm.Data[CAKey] = string(r.ca)
	}
	if s := secretsAnnotation(r.mounts); s != "" {
		cm.Annotations = map[string]string{AnnotationSecrets: s}
	}
	return cm, nil
}

// secretsAnnotation lists the mounted Secrets: "<role>=<secret>/<key>,<key>;...", sorted by role.
func secretsAnnotation(mounts []secretMount) string {
	parts := make([]string, 0, len(mounts))
	for _, m := range mounts {
		keys := make([]string, len(m.items))
		for i, it := range m.items {
			keys[i] = it.Key
		}
		parts = append(parts, m.role+"="+m.secret+"/"+strings.Join(keys, ","))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// ConfigHash is the hex SHA-256 of the ConfigMap's data and binary data (every key and value, in key
// order) and of its AnnotationSecrets annotation (the Secrets' names and keys, never their values).
// Deployment puts it on the pod template, so that any change to the config or to which Secrets are
// mounted rolls the pods; a Secret's rotated value is picked up by the pods without a restart.
func ConfigHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	write := func(section, k string, v []byte) {
		fmt.Fprintf(h, "%s\x00%d:%s\x00%d:", section, len(k), k, len(v))
		h.Write(v)
	}
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		write("data", k, []byte(cm.Data[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
		write("binaryData", k, cm.BinaryData[k])
	}
	write("secrets", "", []byte(cm.Annotations[AnnotationSecrets]))
	return hex.EncodeToString(h.Sum(nil))
}
