package devenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// The Strimzi KafkaUser objects that document the ACLs of the manager and of one namespace's
// consumers (config/strimzi): the secured stack enforces exactly these on its broker.
const (
	operatorKafkaUserFile = "kafkauser-operator.yaml"
	consumerKafkaUserFile = "kafkauser-consumer.yaml"
	// strimziSampleNamespace is the namespace config/strimzi/kafkauser-consumer.yaml is written for;
	// it stands for the pipeline's namespace.
	strimziSampleNamespace = "retryops-samples"
)

// kafkaUser is what the stack reads of a Strimzi KafkaUser (kafka.strimzi.io/v1).
type kafkaUser struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Authentication struct {
			Type string `json:"type"`
		} `json:"authentication"`
		Authorization struct {
			Type string       `json:"type"`
			ACLs []strimziACL `json:"acls"`
		} `json:"authorization"`
	} `json:"spec"`
}

type strimziACL struct {
	Resource struct {
		Type        string `json:"type"`
		Name        string `json:"name"`
		PatternType string `json:"patternType"`
	} `json:"resource"`
	Operations []string `json:"operations"`
	Host       string   `json:"host"`
	Type       string   `json:"type"`
}

// readKafkaUser reads config/strimzi/<file>, with namespace in place of strimziSampleNamespace
// when namespace is not empty.
func readKafkaUser(file, namespace string) (*kafkaUser, error) {
	path := filepath.Join(envtestutil.RepoRoot(), "config", "strimzi", file)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := string(b)
	if namespace != "" {
		if !strings.Contains(text, strimziSampleNamespace) {
			return nil, fmt.Errorf("%s does not mention the namespace %s it stands for", path, strimziSampleNamespace)
		}
		text = strings.ReplaceAll(text, strimziSampleNamespace, namespace)
	}
	u := &kafkaUser{}
	if err := yaml.Unmarshal([]byte(text), u); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if u.Metadata.Name == "" || u.Spec.Authentication.Type != "scram-sha-512" || u.Spec.Authorization.Type != "simple" {
		return nil, fmt.Errorf("%s: want a named KafkaUser with scram-sha-512 authentication and simple authorization", path)
	}
	return u, nil
}

// aclBuilders turns the user's spec.authorization.acls into kadm ACLs for the principal User:<name>,
// as Strimzi's User Operator creates them on the broker.
func (u *kafkaUser) aclBuilders() ([]*kadm.ACLBuilder, error) {
	var out []*kadm.ACLBuilder
	for i, a := range u.Spec.Authorization.ACLs {
		b := kadm.NewACLs()
		principal, host := "User:"+u.Metadata.Name, a.Host
		if host == "" {
			host = "*"
		}
		switch a.Type {
		case "", "allow":
			b.Allow(principal).AllowHosts(host)
		case "deny":
			b.Deny(principal).DenyHosts(host)
		default:
			return nil, fmt.Errorf("KafkaUser %s acl %d: type %q", u.Metadata.Name, i, a.Type)
		}
		switch a.Resource.Type {
		case "topic":
			b.Topics(a.Resource.Name)
		case "group":
			b.Groups(a.Resource.Name)
		case "cluster":
			b.Clusters()
		case "transactionalId":
			b.TransactionalIDs(a.Resource.Name)
		default:
			return nil, fmt.Errorf("KafkaUser %s acl %d: resource type %q", u.Metadata.Name, i, a.Resource.Type)
		}
		switch a.Resource.PatternType {
		case "", "literal":
			b.ResourcePatternType(kadm.ACLPatternLiteral)
		case "prefix":
			b.ResourcePatternType(kadm.ACLPatternPrefixed)
		default:
			return nil, fmt.Errorf("KafkaUser %s acl %d: patternType %q", u.Metadata.Name, i, a.Resource.PatternType)
		}
		if len(a.Operations) == 0 {
			return nil, fmt.Errorf("KafkaUser %s acl %d: no operations", u.Metadata.Name, i)
		}
		var ops []kadm.ACLOperation
		for _, op := range a.Operations {
			o, err := kmsg.ParseACLOperation(op)
			if err != nil {
				return nil, fmt.Errorf("KafkaUser %s acl %d: %w", u.Metadata.Name, i, err)
			}
			ops = append(ops, o)
		}
		out = append(out, b.Operations(ops...))
	}
	return out, nil
}
