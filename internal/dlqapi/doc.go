// Package dlqapi serves the read-only deadletters API (api/deadletters/v1alpha1) as an aggregated
// API server built on k8s.io/apiserver: the kube-apiserver authenticates the user and proxies the
// request here; this server checks the front proxy's client certificate (the requestheader CA of
// the extension-apiserver-authentication ConfigMap) and asks the API server whether the user may
// get or list deadletters in the namespace (SubjectAccessReview), like metrics-server. It holds no
// credentials of its own for users and stores nothing: every object is read from the dead letter
// topic of a DeadLetterQueue (internal/kafka Scanner and Admin) and joined with the record of
// decisions (internal/deadletters LoadStates). Only a queue that manages its topic (the topic
// ledger, internal/kafkaspec, records the topic for it) is read: a queue naming a topic it does not
// manage lists nothing, with a warning, as the operator reads none of its records (ClientQueues).
//
// Listing walks the namespace's queues in name order, each queue's partitions in order and each
// partition by offset, in chunks, keeping only the dead letters that match the label and field
// selectors (queue, reason, errorType and pipeline match whole, as a DeadLetterAction's selector
// does; labels are sanitised and cut): memory is bounded by the page (at most 500 dead letters and
// about 4 MiB, keys, values and headers cut at 64 KiB) and one chunk, not by the queue. A list stops
// reading after its scan budget (10s, at most half of what is left of the request's deadline) and
// returns what it found with a continue token, so that a selective list of a huge queue makes
// progress page by page; it ends when its context does. A queue that cannot be read is passed over
// with a warning (the list fails when it is the only queue selected). The continue token is the
// position (queue, partition, next offset), opaque (base64 JSON) and validated.
//
// Decisions come from a cache per replica (states.go, decisions.go): a queue's first read starts
// at the read-from record of the queue reconciler's last survey, later ones read on from where the
// last stopped, and what decisions share is kept once. It is bounded per queue (past it, a page
// reads the decisions on its own chunks' records alone) and in all (the least recently read queues
// go).
//
// The files, as metrics-server's pkg/api splits its storage: storage.go (the REST storage and
// get), list.go (list and its budgets), filter.go (the selectors and the continue token), table.go
// (the table kubectl prints, whose cells pass through internal/termsafe), source.go (the queues and
// whether they manage their topic), server.go (the server, run by cmd/manager on every replica;
// Options.Groups installs other API groups, such as internal/extmetrics, beside deadletters, so
// that this package knows nothing of them) and certs.go (a self-signed serving certificate shared
// by the replicas through a Secret, its CA written into the APIService). The package reaches Kafka
// only through internal/kafka and knows neither franz-go, the controllers nor internal/render.
package dlqapi
