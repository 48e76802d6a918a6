package helm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

var (
	managerOnce sync.Once
	managerBin  string
	managerErr  error
)

// managerBinary builds cmd/manager once for the package's tests.
func managerBinary(t *testing.T) string {
	t.Helper()
	managerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "retryops-manager-")
		if err != nil {
			managerErr = err
			return
		}
		managerBin = filepath.Join(dir, "manager")
		cmd := exec.Command("go", "build", "-o", managerBin, "./cmd/manager")
		cmd.Dir = envtestutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			managerErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if managerErr != nil {
		t.Fatalf("building cmd/manager: %v", managerErr)
	}
	return managerBin
}

// TestTheChartRefusesWhatTheManagerRefuses takes values the manager would refuse at start, one at a
// time: the manager, run with the flags those values give, exits with a message saying why, and both
// helms refuse to render the chart with a message naming the value, so that no release is installed
// whose manager cannot start.
func TestTheChartRefusesWhatTheManagerRefuses(t *testing.T) {
	password := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(password, []byte("hunter2"), 0o600); err != nil {
		t.Fatal(err)
	}
	const tlsDir = "/etc/retry-operator/kafka-tls"
	for _, tc := range []struct {
		name   string
		values string
		// args are the manager's flags the values give; wantManager is in its error.
		args        []string
		wantManager string
		// wantHelm are in helm's error: the value's path (or name) and the value.
		wantHelm []string
	}{
		{"SASL PLAIN without TLS",
			"kafka: {sasl: {mechanism: PLAIN, username: app, secretName: kafka-user}}\n",
			[]string{"--kafka-sasl-mechanism=PLAIN", "--kafka-sasl-username=app", "--kafka-sasl-password-file=" + password},
			"SASL PLAIN without TLS would send the password in clear text",
			[]string{"kafka.sasl.mechanism PLAIN", "kafka.tls.enabled"}},
		{"a client certificate without its Secret",
			"kafka: {tls: {enabled: true, certKey: user.crt, keyKey: user.key}}\n",
			[]string{"--kafka-tls", "--kafka-tls-cert-file=" + tlsDir + "/user.crt", "--kafka-tls-key-file=" + tlsDir + "/user.key"},
			"--kafka-tls-cert-file: open " + tlsDir + "/user.crt",
			[]string{`kafka.tls.certKey "user.crt" needs kafka.tls.secretName`}},
		{"a topic prefix that does not keep namespaces apart",
			"claimPolicy: {topicPrefix: \"{namespace}-\"}\n",
			[]string{"--topic-prefix={namespace}-"},
			`--topic-prefix "{namespace}-" does not keep namespaces apart`,
			[]string{"/claimPolicy/topicPrefix", "'{namespace}-'"}},
		{"a consumer Secret name that no Secret can have",
			"kafka: {consumerSecret: \"{namespace}_consumer\"}\n",
			[]string{"--kafka-consumer-secret={namespace}_consumer"},
			`"{namespace}_consumer" is not a Secret name`,
			[]string{"/kafka/consumerSecret", "'{namespace}_consumer'"}},
		{"an allowed bootstrap server without a port",
			"claimPolicy: {allowedBootstrapServers: [kafka.svc]}\n",
			[]string{"--kafka-allowed-bootstrap-servers=kafka.svc"},
			`allowed bootstrap server "kafka.svc" is not host:port`,
			[]string{"/claimPolicy/allowedBootstrapServers/0", "'kafka.svc'"}},
		{"an alert-rule label value with a space",
			"alerts: {ruleLabels: {team: platform team}}\n",
			[]string{"--alert-rule-labels=team=platform team"},
			`label value "platform team"`,
			[]string{"/alerts/ruleLabels/team", "'platform team'"}},
		{"a log level the manager does not know",
			"logLevel: verbose\n",
			[]string{"--zap-log-level=verbose"},
			`invalid log level "verbose"`,
			[]string{"/logLevel", "'verbose'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(managerBinary(t), append(tc.args, "--kafka-bootstrap-servers=kafka:9092")...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(string(out), tc.wantManager) {
				t.Errorf("the manager with %q: %v, want it to exit saying %q:\n%s", tc.args, err, tc.wantManager, out)
			}
			values := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(values, []byte(tc.values), 0o600); err != nil {
				t.Fatal(err)
			}
			eachHelm(t, func(t *testing.T, helm string) {
				_, err := runErr(nil, helm, "template", release, chartDir, "--namespace", namespace, "--values", values)
				if err == nil {
					t.Fatalf("helm template rendered values the manager refuses:\n%s", tc.values)
				}
				for _, w := range tc.wantHelm {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("helm's error does not name %q:\n%v", w, err)
					}
				}
			})
		})
	}
}

// Several replicas reconcile at once without leader election, and the topic ledger assumes one
// writer: the chart refuses replicaCount above 1 without it, and takes it with it.
func TestTheChartRefusesReplicasWithoutLeaderElection(t *testing.T) {
	dir := t.TempDir()
	off, on := filepath.Join(dir, "off.yaml"), filepath.Join(dir, "on.yaml")
	if err := os.WriteFile(off, []byte("replicaCount: 2\nleaderElection: {enabled: false}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(on, []byte("replicaCount: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eachHelm(t, func(t *testing.T, helm string) {
		_, err := runErr(nil, helm, "template", release, chartDir, "--namespace", namespace, "--values", off)
		if err == nil || !strings.Contains(err.Error(), "replicaCount 2 needs leaderElection.enabled") {
			t.Errorf("helm template with 2 replicas and no leader election: %v, want it refused", err)
		}
		if _, err := runErr(nil, helm, "template", release, chartDir, "--namespace", namespace, "--values", on); err != nil {
			t.Errorf("helm template with 2 replicas and leader election: %v", err)
		}
	})
}
