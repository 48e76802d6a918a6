package kafkaspec

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
)

// A sasl.jaas.config the operator reads differently from Kafka's own parser (which takes the last
// of several options, single quotes as quotes, comments as nothing, backslash escapes) would give
// the pods a user nobody wrote: every value that is not one plain username="..." is refused with a
// message asking for key "username", and so is a user name a condition or a log could not show
// as it is (C1 controls, bidirectional formatting, invalid UTF-8), never taken nor shown.
func TestResolveConsumerIdentityRefusesAmbiguousJAAS(t *testing.T) {
	d := Defaults{SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "op", Password: "op-pass"}, ConsumerSecret: "team-consumer"}
	const module = "org.apache.kafka.common.security.scram.ScramLoginModule required "
	for name, jaas := range map[string]string{
		"two usernames (Kafka takes the last)": module + `username="evil" username="team";`,
		"a username in single quotes":          module + `password=' username="evil"' username="team";`,
		"a username in a comment":              module + `/* username="evil" */ username="team";`,
		"an escaped quote in the user name":    module + `username="te\"am";`,
		"a user name in single quotes only":    module + `username='team';`,
		"C1 control in the user name":          module + "username=\"te\u0085am\";",
		"bidi override in the user name":       module + "username=\"\u202emaet\";",
		"invalid UTF-8 in the user name":       module + "username=\"te\xffam\";",
		"username= without a quoted value":     module + `username=team;`,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
				secret("team-consumer", map[string]string{"password": "p", "sasl.jaas.config": jaas})).Build()
			got, err := ResolveConsumerIdentity(context.Background(), c, "ns", d)
			var e *Error
			g.Expect(errors.As(err, &e)).To(BeTrue(), "took %+v", got)
			g.Expect(e.Missing).To(BeTrue(), "the namespace's Secret, not the manager, must change")
			g.Expect(e.Message).To(And(ContainSubstring(`"sasl.jaas.config"`), ContainSubstring(`add key "username"`)))
			g.Expect(strings.ContainsAny(e.Message, "\u0085\u202e") || !utf8.ValidString(e.Message)).To(BeFalse(), "the user name is not shown: %q", e.Message)
		})
	}
	// Strimzi's own shape, spaces around "=" and a user with dots and dashes still resolve.
	for jaas, user := range map[string]string{
		module + `username="team-a.consumer" password="Xy12";`: "team-a.consumer",
		module + `username = "u_1"  password="p";`:             "u_1",
		module + `xusername="other" username="team";`:          "team",
	} {
		g := NewWithT(t)
		c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
			secret("team-consumer", map[string]string{"password": "p", "sasl.jaas.config": jaas})).Build()
		got, err := ResolveConsumerIdentity(context.Background(), c, "ns", d)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Username).To(Equal(user))
	}
}
