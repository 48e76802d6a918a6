package dispatcher

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaProblemTTL is how long a fetch or write problem is kept without being seen again.
const KafkaProblemTTL = kafkaProblemTTL

// DeadLetterCluster names the dead-letter cluster's clients for BrokerConnect.
const DeadLetterCluster = "deadLetter "

// BrokerConnect calls the connection hook of the clients of cluster ("" for the source cluster's,
// DeadLetterCluster) as franz-go does after a connection attempt to node (seeds are negative).
func (e *Engine) BrokerConnect(cluster string, node int32, err error) {
	kafkaHooks{e: e, cluster: cluster}.OnBrokerConnect(kgo.BrokerMetadata{NodeID: node, Host: "kafka", Port: 9093}, 0, nil, err)
}

// KafkaPlaces are the places of the Kafka problems the engine keeps, sorted.
func (e *Engine) KafkaPlaces() []string {
	e.kafkaMu.Lock()
	defer e.kafkaMu.Unlock()
	var out []string
	for w := range e.kafka.problems {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}
