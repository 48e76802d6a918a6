package kafkaspec

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Tenancy are the manager's limits on the Kafka connections of resources, for a cluster shared by
// several tenants. The zero value limits nothing.
type Tenancy struct {
	// AllowedBootstrapServers are the host:port patterns every bootstrap server a resource names must
	// match (--kafka-allowed-bootstrap-servers): a pattern is an exact host:port (host compared
	// case-insensitively), or "*.<domain>:<port>", where "*" stands for one or more leading labels.
	// Empty allows any server. The default connection is the operator's own and is not checked.
	AllowedBootstrapServers []string
	// RequireResourceCredentials refuses resources that name no bootstrap servers of their own and
	// would so borrow the operator's default connection and its credentials
	// (--require-resource-credentials).
	RequireResourceCredentials bool
	// TopicPrefix is the topic claim policy (--topic-prefix): the prefix every topic a resource makes
	// the operator create or adopt must start with, where "{namespace}" stands for the resource's
	// namespace ("{namespace}." gives namespace team-a the topics team-a.*). Empty allows any name, for
	// a cluster with one tenant. It covers the source topic a pipeline reads as well (CheckSourceClaim):
	// reading a topic with the operator's credentials, into the tenant's sink, is a claim too.
	TopicPrefix string
	// GroupPrefix is the consumer group claim policy (--group-prefix): the prefix, "{namespace}"
	// standing for the namespace, of every consumer group a pipeline joins (CheckGroupClaim). Nil
	// means TopicPrefix (a pipeline's default group, <namespace>.<name>, meets "{namespace}."); a
	// pointer to "" allows any group.
	GroupPrefix *string
}

// topicPrefixPlaceholder is replaced by the namespace in Tenancy.TopicPrefix.
const topicPrefixPlaceholder = "{namespace}"

// flagTopicPrefix is the manager flag of the topic claim policy, named in messages.
const flagTopicPrefix = "--topic-prefix"

// flagGroupPrefix is the manager flag of the consumer group claim policy, named in messages.
const flagGroupPrefix = "--group-prefix"

// CheckClaim reports, as a user error naming the rule, a topic that namespace may not claim (make
// the operator create or adopt) under the manager's topic claim policy.
func (t Tenancy) CheckClaim(namespace, topic string) error {
	return t.checkTopic(namespace, "topic", topic, "claim")
}

// CheckSourceClaim reports, as a user error naming the rule, a source topic that a pipeline of
// namespace may not read under the manager's topic claim policy: its consumers would read it with
// the operator's credentials (or the pipeline's own) and deliver it to the pipeline's sink, and
// its status would show the topic's figures. The rule is CheckClaim's, whatever the credentials:
// the claim policy is about names on a shared cluster.
func (t Tenancy) CheckSourceClaim(namespace, topic string) error {
	return t.checkTopic(namespace, "source topic", topic, "read")
}

func (t Tenancy) checkTopic(namespace, what, topic, verb string) error {
	prefix, ok := claimPrefix(t.TopicPrefix, namespace)
	if ok || strings.HasPrefix(topic, prefix) {
		return nil
	}
	return &Error{Message: fmt.Sprintf("%s %q is outside what namespace %s may %s: the manager's %s %q gives it only topics starting with %q",
		what, topic, namespace, verb, flagTopicPrefix, t.TopicPrefix, prefix)}
}

// CheckGroupClaim reports, as a user error naming the rule, a consumer group that a pipeline of
// namespace may not join under the manager's group claim policy (GroupPrefix, else TopicPrefix):
// joining another application's group takes its partitions and commits its offsets.
func (t Tenancy) CheckGroupClaim(namespace, group string) error {
	policy, rule := t.TopicPrefix, fmt.Sprintf("%s %q (which %s defaults to)", flagTopicPrefix, t.TopicPrefix, flagGroupPrefix)
	if t.GroupPrefix != nil {
		policy, rule = *t.GroupPrefix, fmt.Sprintf("%s %q", flagGroupPrefix, *t.GroupPrefix)
	}
	prefix, ok := claimPrefix(policy, namespace)
	if ok || strings.HasPrefix(group, prefix) {
		return nil
	}
	return &Error{Message: fmt.Sprintf("consumer group %q is outside what namespace %s may join: the manager's %s gives it only groups starting with %q; "+
		"leave spec.source.consumerGroup out (the default is <namespace>.<name>) or name a group with that prefix", group, namespace, rule, prefix)}
}

// claimPrefix is policy for namespace; ok is true when the policy allows any name.
func claimPrefix(policy, namespace string) (prefix string, ok bool) {
	if policy == "" {
		return "", true
	}
	return strings.ReplaceAll(policy, topicPrefixPlaceholder, namespace), false
}

// CheckGroupPrefix reports a consumer group claim policy that could never be met (longer than 200
// characters, or with control characters) or that does not keep namespaces apart (separates).
func CheckGroupPrefix(prefix string) error {
	if len(prefix) > 200 {
		return fmt.Errorf("%s %q is longer than 200 characters", flagGroupPrefix, prefix)
	}
	for _, c := range prefix {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%s %q has a control character", flagGroupPrefix, prefix)
		}
	}
	return separates(flagGroupPrefix, prefix)
}

// separates reports a claim policy whose namespace is not followed by a character no namespace
// name has (namespace names are DNS labels: a-z, 0-9 and '-'): under "{namespace}-", namespace
// team's prefix team- starts the names of namespace team-a too. A policy without the placeholder
// gives every namespace the same names, as it says.
func separates(flag, policy string) error {
	_, rest, ok := strings.Cut(policy, topicPrefixPlaceholder)
	if !ok || strings.IndexFunc(rest, func(c rune) bool { return (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' }) >= 0 {
		return nil
	}
	return fmt.Errorf("%s %q does not keep namespaces apart: a namespace name may continue with what follows %s, so namespace team's names would start namespace team-a's too; "+
		"follow %s with a character no namespace has, such as '.' (%q) or '_'", flag, policy, topicPrefixPlaceholder, topicPrefixPlaceholder, topicPrefixPlaceholder+".")
}

// topicNameChars are the characters of a Kafka topic name.
const topicNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

// CheckTopicPrefix reports a topic claim policy that could never be met (a prefix with characters
// a topic name cannot have, other than the placeholder) or that does not keep namespaces apart
// (separates).
func CheckTopicPrefix(prefix string) error {
	rest := strings.ReplaceAll(prefix, topicPrefixPlaceholder, "")
	for _, c := range rest {
		if !strings.ContainsRune(topicNameChars, c) {
			return fmt.Errorf("%s %q: a topic name has only letters, digits, '.', '_' and '-' (and %s stands for the namespace)", flagTopicPrefix, prefix, topicPrefixPlaceholder)
		}
	}
	if len(rest) > 200 {
		return fmt.Errorf("%s %q is longer than 200 characters", flagTopicPrefix, prefix)
	}
	return separates(flagTopicPrefix, prefix)
}

// The manager flags named in the messages.
const (
	flagAllowedServers     = "--kafka-allowed-bootstrap-servers"
	flagRequireCredentials = "--require-resource-credentials"
)

// check applies the connection rules that need no Secret to spec: tls and sasl only with bootstrap
// servers, the manager's requirement of resources' own credentials, and its allow-list.
func (d Defaults) check(spec *retryv1alpha1.KafkaConnection) error {
	own := spec != nil && len(spec.BootstrapServers) > 0
	switch {
	case !own && spec != nil && (spec.TLS != nil || spec.SASL != nil):
		return &Error{Message: "spec.kafka.tls and spec.kafka.sasl apply only with spec.kafka.bootstrapServers: " +
			"without them the operator's default connection (its servers, TLS and SASL) is used whole; " +
			"set spec.kafka.bootstrapServers too, or remove tls and sasl"}
	case !own && d.RequireResourceCredentials:
		return &Error{Message: "the manager runs with " + flagRequireCredentials + ": set spec.kafka.bootstrapServers " +
			"(with the tls and sasl of your own Kafka credentials); the operator's default Kafka connection is not lent to resources"}
	case !own:
		return nil
	}
	for _, s := range spec.BootstrapServers {
		if !serverAllowed(d.AllowedBootstrapServers, s) {
			return &Error{Message: fmt.Sprintf("bootstrap server %q is not allowed by the manager's %s (%s)",
				s, flagAllowedServers, strings.Join(d.AllowedBootstrapServers, ","))}
		}
	}
	return nil
}

// serverAllowed reports whether server matches one of patterns, or patterns is empty.
func serverAllowed(patterns []string, server string) bool {
	if len(patterns) == 0 {
		return true
	}
	host, port, err := net.SplitHostPort(strings.TrimSpace(server))
	if err != nil {
		return false
	}
	host = strings.ToLower(host)
	for _, p := range patterns {
		ph, pp, err := net.SplitHostPort(p)
		if err != nil || pp != port {
			continue
		}
		ph = strings.ToLower(ph)
		if suffix, ok := strings.CutPrefix(ph, "*"); ok {
			// suffix starts with "."; at least one label must come before it.
			if len(host) > len(suffix) && strings.HasSuffix(host, suffix) {
				return true
			}
			continue
		}
		if host == ph {
			return true
		}
	}
	return false
}

// CheckAllowedServers reports the first pattern of an allow-list (Tenancy.AllowedBootstrapServers)
// that is not host:port with a valid port, or has a "*" other than a whole leading label followed
// by a domain.
func CheckAllowedServers(patterns []string) error {
	for _, p := range patterns {
		host, port, err := net.SplitHostPort(p)
		if err != nil {
			return fmt.Errorf("allowed bootstrap server %q is not host:port: %w", p, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("allowed bootstrap server %q has an invalid port", p)
		}
		rest, wildcard := strings.CutPrefix(host, "*.")
		switch {
		case host == "":
			return fmt.Errorf("allowed bootstrap server %q has an empty host", p)
		case strings.Contains(rest, "*") || (!wildcard && strings.HasPrefix(host, "*")):
			return fmt.Errorf("allowed bootstrap server %q: %w", p, errWildcard)
		case wildcard && (rest == "" || strings.HasPrefix(rest, ".") || strings.HasSuffix(rest, ".")):
			return fmt.Errorf("allowed bootstrap server %q: %w", p, errWildcard)
		}
	}
	return nil
}

var errWildcard = errors.New(`"*" may only stand for the leading labels of a domain, as in *.kafka.svc:9092`)
