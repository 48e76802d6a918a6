package kafkaspec

import (
	"strings"
	"testing"
)

// A claim policy keeps namespaces apart only when what follows the namespace in it has a character
// no namespace name has (such as '.' or '_'): namespace names are DNS labels (a-z, 0-9, '-'), so
// with "{namespace}-" namespace team's prefix "team-" starts namespace team-a's names too. The
// manager refuses such a policy at start, for topics and for groups.
func TestClaimPolicyKeepsNamespacesApart(t *testing.T) {
	// Each policy, and a namespace whose names namespace team may then claim.
	for prefix, victim := range map[string]string{"{namespace}": "team-a", "{namespace}-": "team-a", "grp-{namespace}-": "team-a", "{namespace}-x": "team-x", "{namespace}0": "team0"} {
		other := strings.ReplaceAll(prefix, topicPrefixPlaceholder, victim) + "orders"
		if err := CheckTopicPrefix(prefix); err == nil {
			t.Errorf("--topic-prefix %q accepted: namespace team may then claim namespace %s's topic %q (CheckClaim: %v)",
				prefix, victim, other, Tenancy{TopicPrefix: prefix}.CheckClaim("team", other))
		}
		if err := CheckGroupPrefix(prefix); err == nil {
			t.Errorf("--group-prefix %q accepted: namespace team may then join namespace %s's group %q (CheckGroupClaim: %v)",
				prefix, victim, other, Tenancy{GroupPrefix: &prefix}.CheckGroupClaim("team", other))
		}
	}
	for _, prefix := range []string{"", "{namespace}.", "{namespace}_", "tenants.{namespace}.", "shared.", "{namespace}-x.", "{namespace}.{namespace}"} {
		if err := CheckTopicPrefix(prefix); err != nil {
			t.Errorf("--topic-prefix %q: %v", prefix, err)
		}
		if err := CheckGroupPrefix(prefix); err != nil {
			t.Errorf("--group-prefix %q: %v", prefix, err)
		}
	}
	if err := CheckGroupPrefix("grp:{namespace}/"); err != nil {
		t.Errorf("a group name may have any character after the namespace: %v", err)
	}
}
