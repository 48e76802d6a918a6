package admission

import (
	"context"
	"testing"
	"time"
)

// Pod Security's baseline also forbids Windows HostProcess containers (the host's whole access,
// as a privileged container has on Linux) and SELinux options beyond the container types (a type
// such as spc_t runs unconfined; a user or role is set by no workload): the template policy refuses
// them too, unless the namespace opts out; the container types stay allowed.
func TestTemplatePolicyRefusesHostProcessAndSELinuxOptions(t *testing.T) {
	env := policyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin := env.Client
	namespace(ctx, t, admin, "hostproc", nil)
	namespace(ctx, t, admin, "hostproc-trusted", map[string]string{optOutLabel: "true"})
	podSC := func(sc map[string]any) map[string]any {
		return map[string]any{"securityContext": sc, "containers": []any{container("consumer", nil)}}
	}
	one := func(sc map[string]any) map[string]any {
		return map[string]any{"containers": []any{container("consumer", sc)}}
	}
	for _, tc := range []struct {
		name string
		pod  map[string]any
		want []string // nil: allowed
	}{
		{"hostprocess-pod", podSC(map[string]any{"windowsOptions": map[string]any{"hostProcess": true}}), []string{"HostProcess", optOutLabel}},
		{"hostprocess-container", one(map[string]any{"windowsOptions": map[string]any{"hostProcess": true}}), []string{"HostProcess"}},
		{"hostprocess-false", one(map[string]any{"windowsOptions": map[string]any{"hostProcess": false}}), nil},
		{"selinux-spc", one(map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}}), []string{"SELinux", optOutLabel}},
		{"selinux-user-pod", podSC(map[string]any{"seLinuxOptions": map[string]any{"user": "system_u"}}), []string{"SELinux"}},
		{"selinux-role", one(map[string]any{"seLinuxOptions": map[string]any{"role": "sysadm_r"}}), []string{"SELinux"}},
		{"selinux-container-type", one(map[string]any{"seLinuxOptions": map[string]any{"type": "container_t", "level": "s0:c1,c2"}}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ns := range []string{"hostproc", "hostproc-trusted"} {
				err := create(ctx, admin, pipeline(ns, tc.name, tc.pod))
				if tc.want == nil || ns == "hostproc-trusted" {
					expectAllowed(t, err)
				} else {
					expectDenied(t, err, tc.want...)
				}
			}
		})
	}
}
