package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// authEntry is one line of --auth-log.
type authEntry struct {
	User string `json:"user"`
}

// logAuthentications writes to w the user of every SASL authentication the cluster receives. The
// broker lets the request through unchanged: this only watches.
func logAuthentications(c *kfake.Cluster, w io.Writer) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if user, ok := saslUser(req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes); ok {
			mu.Lock()
			_ = enc.Encode(authEntry{User: user})
			mu.Unlock()
		}
		return nil, nil, false
	})
}

// saslUser is the user an authentication's first message names: SCRAM's client-first message
// ("n,,n=<user>,r=<nonce>", with "=2C" and "=3D" escaping "," and "=") or PLAIN's
// "<authzid>\x00<user>\x00<password>". SCRAM's client-final message names no user: false.
func saslUser(auth []byte) (string, bool) {
	switch {
	case bytes.HasPrefix(auth, []byte("n,")) || bytes.HasPrefix(auth, []byte("y,")):
		for _, f := range strings.Split(string(auth), ",") {
			if u, ok := strings.CutPrefix(f, "n="); ok {
				return strings.NewReplacer("=2C", ",", "=3D", "=").Replace(u), true
			}
		}
		return "", false
	case bytes.Count(auth, []byte{0}) == 2:
		return string(bytes.Split(auth, []byte{0})[1]), true
	default:
		return "", false
	}
}
