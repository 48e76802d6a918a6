package admission

import (
	"context"
	"testing"
	"time"
)

// The template policy refuses what Pod Security's baseline forbids beyond privilege and the host's
// namespaces: host ports, an unmasked /proc, seccomp or AppArmor Unconfined, unsafe sysctls; the
// namespace that opts out takes them, and what baseline allows stays allowed.
func TestTemplatePolicyHoldsTemplatesToBaseline(t *testing.T) {
	env := policyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin := env.Client
	namespace(ctx, t, admin, "baseline", nil)
	namespace(ctx, t, admin, "baseline-trusted", map[string]string{optOutLabel: "true"})
	refusedByThePolicy(ctx, t, admin, pipeline("baseline", "probe", privilegedPod()), "a privileged template is refused")

	withPort := func(port map[string]any) map[string]any {
		c := container("consumer", nil)
		c["ports"] = []any{port}
		return map[string]any{"containers": []any{c}}
	}
	podSC := func(sc map[string]any) map[string]any {
		return map[string]any{"securityContext": sc, "containers": []any{container("consumer", nil)}}
	}
	for _, tc := range []struct {
		name     string
		pod      map[string]any
		metadata map[string]any
		want     []string // nil: allowed
	}{
		{"host-port", withPort(map[string]any{"containerPort": int64(8080), "hostPort": int64(80)}), nil, []string{"host ports (consumer:80)", optOutLabel}},
		{"host-port-0", withPort(map[string]any{"containerPort": int64(8080), "hostPort": int64(0)}), nil, nil},
		{"proc-mount", map[string]any{"containers": []any{container("consumer", map[string]any{"procMount": "Unmasked"})}}, nil, []string{"procMount Unmasked (consumer)", optOutLabel}},
		{"proc-mount-default", map[string]any{"containers": []any{container("consumer", map[string]any{"procMount": "Default"})}}, nil, nil},
		{"seccomp-pod", podSC(map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}), nil, []string{"seccomp Unconfined (the pod)", optOutLabel}},
		{"seccomp-container", map[string]any{"containers": []any{container("consumer", map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}})}}, nil, []string{"seccomp Unconfined (consumer)"}},
		{"seccomp-runtime-default", podSC(map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}}), nil, nil},
		{"apparmor-pod", podSC(map[string]any{"appArmorProfile": map[string]any{"type": "Unconfined"}}), nil, []string{"AppArmor Unconfined (the pod)", optOutLabel}},
		{"apparmor-container", map[string]any{"containers": []any{container("consumer", map[string]any{"appArmorProfile": map[string]any{"type": "Unconfined"}})}}, nil, []string{"AppArmor Unconfined (consumer)"}},
		{"apparmor-annotation", plainPod(), map[string]any{"annotations": map[string]any{"container.apparmor.security.beta.kubernetes.io/consumer": "unconfined"}}, []string{"AppArmor Unconfined (consumer)"}},
		{"apparmor-runtime-default", plainPod(), map[string]any{"annotations": map[string]any{"container.apparmor.security.beta.kubernetes.io/consumer": "runtime/default"}}, nil},
		{"unsafe-sysctl", podSC(map[string]any{"sysctls": []any{map[string]any{"name": "kernel.msgmax", "value": "65536"}, map[string]any{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}}}), nil, []string{"unsafe sysctls (kernel.msgmax)", optOutLabel}},
		{"safe-sysctls", podSC(map[string]any{"sysctls": []any{map[string]any{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}, map[string]any{"name": "net.ipv4.tcp_keepalive_time", "value": "600"}}}), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ns := range []string{"baseline", "baseline-trusted"} {
				p := pipeline(ns, tc.name, tc.pod)
				if tc.metadata != nil {
					p.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"] = tc.metadata
				}
				err := create(ctx, admin, p)
				if tc.want == nil || ns == "baseline-trusted" {
					expectAllowed(t, err)
				} else {
					expectDenied(t, err, tc.want...)
				}
			}
		})
	}
}
