package render

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/config"
)

// The dispatcher container in sink mode.
const (
	// DispatcherContainer is the name of the dispatcher container.
	DispatcherContainer = "dispatcher"
	// PortMetrics and PortHealth name the dispatcher's container ports.
	PortMetrics = "metrics"
	PortHealth  = "health"
	// DispatcherUID is the user the dispatcher runs as: distroless's nonroot user, the image's USER.
	DispatcherUID = 65532
	// PathHealthz, PathReadyz and PathMetrics are the dispatcher's endpoints (sdk/dispatcher's
	// constants of the same names; a test keeps them equal without linking the data plane into the
	// operator).
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
	// ShutdownMargin (seconds) is added to the config's drainTimeout for
	// terminationGracePeriodSeconds: what the dispatcher may take after its drain (abandoning what
	// is left, the final commit, leaving the group: dispatcher.ShutdownAfterDrain, 10 s), removing
	// its circuit breaker report (circuitstate.RemoveTimeout, 2 s) and stopping its server (1 s),
	// plus 2 s for the signal to arrive and the process to exit. A test keeps it above their sum.
	ShutdownMargin = 15
)

// EnvGoMemLimit is the Go runtime's soft memory limit (a plain byte count): the garbage collector
// works harder as the process nears it instead of letting the heap double past the container's
// limit. GoMemLimitPercent is the share of the dispatcher container's memory limit it is set to in
// sink mode, computed at render time from the rendered limit (the Deployment is rendered again
// whenever the resources change): the rest is headroom for what the Go runtime does not count
// (the mapped binary, kernel memory charged to the container) and for the collector to react, the
// 5-10% the Go documentation advises. Without a memory limit it is not set. A pod template (template
// mode) runs the user's containers, whatever their language: it is left to them.
const (
	EnvGoMemLimit     = "GOMEMLIMIT"
	GoMemLimitPercent = 90
)

// goMemLimit returns the GOMEMLIMIT of a container with resources res (GoMemLimitPercent of its
// memory limit, in bytes), false when it has no memory limit.
func goMemLimit(res corev1.ResourceRequirements) (corev1.EnvVar, bool) {
	q, ok := res.Limits[corev1.ResourceMemory]
	if !ok || q.Sign() <= 0 {
		return corev1.EnvVar{}, false
	}
	b := q.Value() // bytes, rounded up
	return corev1.EnvVar{Name: EnvGoMemLimit, Value: strconv.FormatInt(b/100*GoMemLimitPercent+b%100*GoMemLimitPercent/100, 10)}, true
}

// DefaultDispatcherResources are the dispatcher container's resources when Inputs.DispatcherResources
// is nil: requests of 100m CPU and 128Mi memory, a 512Mi memory limit and no CPU limit (a CPU limit
// throttles delivery bursts without protecting anything the request does not).
func DefaultDispatcherResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

// Deployment renders the pipeline's consumer Deployment. configHash is ConfigHash of the rendered
// ConfigMap; it goes on the pod template (AnnotationConfigHash) so that a config change rolls the
// pods.
//
// Sink mode runs the dispatcher image in a container "dispatcher" with RETRYOPS_CONFIG pointing at
// the mounted config, the connection Secrets mounted where the config expects them, metrics and health
// ports, liveness (/healthz) and readiness (/readyz) probes, resources, the restricted Pod Security
// settings (non-root, read-only root filesystem, no privilege escalation, every capability dropped,
// RuntimeDefault seccomp) and a termination grace period above the config's drainTimeout.
//
// Template mode keeps the user's pod spec (containers, init containers, volumes, security context,
// affinity, everything) and metadata, and adds: to every container, RETRYOPS_CONFIG and the seed-style
// environment variables (from the ConfigMap) that the container does not set itself, placed first so
// the user's own variables can refer to them, and the config and Secret mounts; the config and Secret
// volumes; the restricted security settings only where the template leaves a field unset (containers
// and init containers; runAsNonRoot only where no runAsUser of 0 is set); the termination grace period
// when unset. The user's labels and annotations are kept; the selector label and the config hash are
// added. An operator volume name or mount path that the template already uses is a *SpecError.
// Only explicit env entries are seen: a variable the user sets through envFrom is overridden by ours
// (Kubernetes gives env precedence over envFrom); set it under env to keep it.
func Deployment(in *Inputs, configHash string) (*appsv1.Deployment, error) {
	if configHash == "" {
		return nil, fmt.Errorf("render: Deployment needs the ConfigMap's hash")
	}
	r, err := in.render()
	if err != nil {
		return nil, err
	}
	p := in.Pipeline
	grace := int64(math.Ceil(config.Dur(r.cfg.DrainTimeout, config.DefaultDrainTimeout).Seconds())) + ShutdownMargin

	// Secret files are readable by the pod's fsGroup only when there is one (the kubelet gives the
	// files to that group), otherwise by every user of the container.
	secretMode := int32(0o444)
	if in.sinkMode() || (in.Pipeline.Spec.Template.Spec.SecurityContext != nil && in.Pipeline.Spec.Template.Spec.SecurityContext.FSGroup != nil) {
		secretMode = 0o440
	}
	volumes, mounts := operatorVolumes(in, r, secretMode)
	var tmpl corev1.PodTemplateSpec
	if in.sinkMode() {
		tmpl, err = sinkPod(in, r, volumes, mounts, grace)
	} else {
		tmpl, err = templatePod(in, r, volumes, mounts, grace)
	}
	if err != nil {
		return nil, err
	}
	tmpl.Annotations[AnnotationConfigHash] = configHash

	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      DeploymentName(p),
			Namespace: p.Namespace,
			Labels:    pipelineLabels(p, "consumer"),
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(deploymentReplicas(in)),
			Selector: &metav1.LabelSelector{MatchLabels: SelectorLabels(p)},
			Template: tmpl,
		},
	}, nil
}

// operatorVolumes returns the config and Secret volumes and the mounts every consumer container gets.
func operatorVolumes(in *Inputs, r *rendered, secretMode int32) ([]corev1.Volume, []corev1.VolumeMount) {
	volumes := []corev1.Volume{{
		Name: ConfigVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(in.Pipeline)},
			Items:                configItems(r),
			DefaultMode:          ptr.To[int32](0o444),
		}},
	}}
	mounts := []corev1.VolumeMount{{Name: ConfigVolume, MountPath: ConfigDir, ReadOnly: true}}
	for _, m := range r.mounts {
		volumes = append(volumes, corev1.Volume{
			Name: m.volume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName:  m.secret,
				Items:       m.items,
				DefaultMode: ptr.To(secretMode),
			}},
		})
		mounts = append(mounts, corev1.VolumeMount{Name: m.volume, MountPath: m.dir, ReadOnly: true})
	}
	return volumes, mounts
}

// configItems are the ConfigMap keys projected into ConfigDir: the config, and the default
// connection's CA bundle when the config names it.
func configItems(r *rendered) []corev1.KeyToPath {
	items := []corev1.KeyToPath{{Key: ConfigKey, Path: ConfigKey}}
	if len(r.ca) > 0 {
		items = append(items, corev1.KeyToPath{Key: CAKey, Path: CAKey})
	}
	return items
}

func sinkPod(in *Inputs, r *rendered, volumes []corev1.Volume, mounts []corev1.VolumeMount, grace int64) (corev1.PodTemplateSpec, error) {
	if in.DispatcherImage == "" {
		return corev1.PodTemplateSpec{}, fmt.Errorf("render: Inputs.DispatcherImage is required in sink mode")
	}
	res := DefaultDispatcherResources()
	if in.DispatcherResources != nil {
		res = *in.DispatcherResources.DeepCopy()
	}
	c := corev1.Container{
		Name:                     DispatcherContainer,
		Image:                    in.DispatcherImage,
		Env:                      []corev1.EnvVar{{Name: config.EnvConfig, Value: ConfigFile}},
		Resources:                res,
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if r.cfg.CircuitReport != nil {
		c.Env = append(c.Env, podNameEnv())
	}
	if e, ok := goMemLimit(res); ok {
		c.Env = append(c.Env, e)
	}
	annotations := map[string]string{"kubectl.kubernetes.io/default-container": DispatcherContainer}
	if port, ok := listenPort(r.cfg.Listen.MetricsAddress); ok {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: PortMetrics, ContainerPort: port, Protocol: corev1.ProtocolTCP})
		annotations["prometheus.io/scrape"] = "true"
		annotations["prometheus.io/port"] = strconv.Itoa(int(port))
		annotations["prometheus.io/path"] = PathMetrics
	}
	if port, ok := listenPort(r.cfg.Listen.HealthAddress); ok {
		if len(c.Ports) == 0 || c.Ports[0].ContainerPort != port {
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: PortHealth, ContainerPort: port, Protocol: corev1.ProtocolTCP})
		}
		probe := func(path string, period int32) *corev1.Probe {
			return &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP,
				}},
				PeriodSeconds:    period,
				TimeoutSeconds:   2,
				FailureThreshold: 3,
			}
		}
		c.LivenessProbe = probe(PathHealthz, 10)
		c.ReadinessProbe = probe(PathReadyz, 5)
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      pipelineLabels(in.Pipeline, "consumer"),
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			Containers:         []corev1.Container{c},
			Volumes:            volumes,
			ServiceAccountName: ServiceAccountName(in.Pipeline),
			// A token only for the report (circuit breaker, Kafka refusing the consumer), which is
			// all its ServiceAccount may do (CircuitRole).
			AutomountServiceAccountToken:  ptr.To(r.cfg.CircuitReport != nil),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(grace),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](DispatcherUID),
				RunAsGroup:     ptr.To[int64](DispatcherUID),
				FSGroup:        ptr.To[int64](DispatcherUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}, nil
}

// listenPort returns the port of a listen address (":9090"), false when it is disabled.
func listenPort(addr string) (int32, bool) {
	if addr == "" || addr == config.Disabled {
		return 0, false
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return int32(n), true
}

// DecodeTemplate decodes a pipeline's spec.template as the API server stores it (JSON) into the pod
// template, strictly. The field is schemaless (x-kubernetes-preserve-unknown-fields), so the API
// server keeps whatever was written, and a plain decode (what a typed client does) drops a field the
// pod template does not have without a word: a typo such as `contaienrs` or `imagee` would leave the
// pods without what the user meant. Here an unknown field, a duplicate field or a field whose name
// differs only in case is a *SpecError naming its path ("spec.template.spec.contaienrs: unknown
// field ..."), as is a value of the wrong type.
func DecodeTemplate(raw []byte) (*retryv1alpha1.PodTemplate, error) {
	t := &retryv1alpha1.PodTemplate{}
	strict, err := sigsjson.UnmarshalStrict(raw, t)
	if err != nil {
		return nil, &SpecError{Field: "spec.template", Message: "cannot be decoded as a pod template (metadata and a core/v1 PodSpec): " + err.Error()}
	}
	if len(strict) == 0 {
		return t, nil
	}
	// Each strict error is "unknown field" or "duplicate field" with the path below spec.template.
	kind := func(e error) string {
		if strings.HasPrefix(e.Error(), "duplicate field") {
			return "duplicate field"
		}
		return "unknown field"
	}
	path := func(e error) string {
		var fe sigsjson.FieldError
		if errors.As(e, &fe) {
			return "spec.template." + fe.FieldPath()
		}
		return "spec.template"
	}
	se := &SpecError{Field: path(strict[0])}
	if kind(strict[0]) == "duplicate field" {
		se.Message = "duplicate field: it is given twice; keep one"
	} else {
		se.Message = "unknown field: a pod template has metadata (labels, annotations) and a core/v1 PodSpec, which has no such field (check its spelling and case)"
	}
	if len(strict) > 1 {
		more := make([]string, 0, len(strict)-1)
		for _, e := range strict[1:] {
			more = append(more, kind(e)+" "+path(e))
		}
		se.Message += "; also " + strings.Join(more, ", ")
	}
	return nil, se
}

func templatePod(in *Inputs, r *rendered, volumes []corev1.Volume, mounts []corev1.VolumeMount, grace int64) (corev1.PodTemplateSpec, error) {
	t := in.Pipeline.Spec.Template
	spec := t.Spec.DeepCopy()
	if len(spec.Containers) == 0 {
		return corev1.PodTemplateSpec{}, &SpecError{Field: "spec.template.spec.containers", Message: "the pod template needs at least one container"}
	}
	for i, v := range spec.Volumes {
		for _, ours := range volumes {
			if v.Name == ours.Name {
				return corev1.PodTemplateSpec{}, &SpecError{
					Field:   fmt.Sprintf("spec.template.spec.volumes[%d].name", i),
					Message: fmt.Sprintf("%q is reserved for the volume the operator adds; rename your volume (names starting with retryops- are reserved)", v.Name),
				}
			}
		}
	}
	spec.Volumes = append(spec.Volumes, volumes...)
	spec.ServiceAccountName = PodServiceAccount(in.Pipeline)

	env := []corev1.EnvVar{{Name: config.EnvConfig, Value: ConfigFile}}
	if r.cfg.CircuitReport != nil {
		env = append(env, podNameEnv())
	}
	for _, e := range seedEnv(r.cfg) {
		env = append(env, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(in.Pipeline)},
				Key:                  e.Name,
			},
		}})
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, m := range c.VolumeMounts {
			for _, ours := range mounts {
				if m.MountPath == ours.MountPath {
					return corev1.PodTemplateSpec{}, &SpecError{
						Field:   fmt.Sprintf("spec.template.spec.containers[%d].volumeMounts", i),
						Message: fmt.Sprintf("mount path %s is reserved for the operator's %s volume; mount your volume elsewhere", m.MountPath, ours.Name),
					}
				}
			}
		}
		set := map[string]bool{}
		for _, e := range c.Env {
			set[e.Name] = true
		}
		var add []corev1.EnvVar
		for _, e := range env {
			if !set[e.Name] {
				add = append(add, e)
			}
		}
		c.Env = append(add, c.Env...)
		c.VolumeMounts = append(c.VolumeMounts, mounts...)
	}
	applySecurityDefaults(spec)
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To(grace)
	}

	labels := map[string]string{}
	annotations := map[string]string{}
	if t.Metadata != nil {
		maps.Copy(labels, t.Metadata.Labels)
		maps.Copy(annotations, t.Metadata.Annotations)
	}
	for k, v := range pipelineLabels(in.Pipeline, "consumer") {
		if _, ok := labels[k]; !ok {
			labels[k] = v
		}
	}
	maps.Copy(labels, SelectorLabels(in.Pipeline))
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec:       *spec,
	}, nil
}

// applySecurityDefaults fills the restricted Pod Security settings the template leaves unset, never
// changing one it sets. Windows pods are left alone (the Linux settings do not apply to them).
func applySecurityDefaults(spec *corev1.PodSpec) {
	if spec.OS != nil && spec.OS.Name == corev1.Windows {
		return
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	pod := spec.SecurityContext
	if pod.SeccompProfile == nil {
		pod.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range spec.InitContainers {
		containerSecurityDefaults(&spec.InitContainers[i], pod)
	}
	for i := range spec.Containers {
		containerSecurityDefaults(&spec.Containers[i], pod)
	}
}

func containerSecurityDefaults(c *corev1.Container, pod *corev1.PodSecurityContext) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	s := c.SecurityContext
	privileged := s.Privileged != nil && *s.Privileged
	if s.AllowPrivilegeEscalation == nil && !privileged && !addsSysAdmin(s.Capabilities) {
		// The API rejects allowPrivilegeEscalation: false with privileged or CAP_SYS_ADMIN.
		s.AllowPrivilegeEscalation = ptr.To(false)
	}
	if s.ReadOnlyRootFilesystem == nil {
		s.ReadOnlyRootFilesystem = ptr.To(true)
	}
	if s.Capabilities == nil {
		s.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	if s.RunAsNonRoot == nil && pod.RunAsNonRoot == nil {
		uid := s.RunAsUser
		if uid == nil {
			uid = pod.RunAsUser
		}
		if uid == nil || *uid != 0 {
			s.RunAsNonRoot = ptr.To(true)
		}
	}
}

func addsSysAdmin(c *corev1.Capabilities) bool {
	if c == nil {
		return false
	}
	for _, a := range c.Add {
		if a == "SYS_ADMIN" || a == "CAP_SYS_ADMIN" {
			return true
		}
	}
	return false
}

// deploymentReplicas are the Deployment's replicas: spec.replicas, or 0 while the pipeline idles.
func deploymentReplicas(in *Inputs) int32 {
	if in.Idle {
		return 0
	}
	return Replicas(in.Pipeline)
}
