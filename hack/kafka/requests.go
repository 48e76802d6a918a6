package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// requestCounts counts the requests the broker receives, per key, and keeps the topics of each
// CreateTopics request and the number of topics of each ListOffsets request: the controllers' scale
// benchmark runs the broker out of its process (so that its heap is the manager's) and reads them
// over HTTP (--requests-addr).
type requestCounts struct {
	mu           sync.Mutex
	counts       map[int16]int64
	created      []string
	offsetTopics []int
}

func countRequests(c *kfake.Cluster) *requestCounts {
	rc := &requestCounts{counts: map[int16]int64{}}
	for k := range int16(kmsg.MaxKey + 1) {
		c.ControlKey(k, func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.counts[k]++
			switch r := req.(type) {
			case *kmsg.CreateTopicsRequest:
				for _, t := range r.Topics {
					rc.created = append(rc.created, t.Topic)
				}
			case *kmsg.ListOffsetsRequest:
				rc.offsetTopics = append(rc.offsetTopics, len(r.Topics))
			}
			return nil, nil, false
		})
	}
	return rc
}

// serve answers GET /counts (requests per key, the key's number as a string), /created (the topics
// of every CreateTopics request, in order) and /list-offsets (the topics of each ListOffsets request).
func (rc *requestCounts) serve(ln net.Listener) *http.Server {
	mux := http.NewServeMux()
	reply := func(path string, v func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			rc.mu.Lock()
			b, err := json.Marshal(v())
			rc.mu.Unlock()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		})
	}
	reply("/counts", func() any {
		out := make(map[string]int64, len(rc.counts))
		for k, v := range rc.counts {
			out[strconv.Itoa(int(k))] = v
		}
		return out
	})
	reply("/created", func() any { return rc.created })
	reply("/list-offsets", func() any { return rc.offsetTopics })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv
}
