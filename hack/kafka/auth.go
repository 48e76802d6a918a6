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

// authEntry is one line of --auth-log. Full is set on its last line once the log reached its bound:
// a reader then knows authentications went unlogged.
type authEntry struct {
	User string `json:"user"`
	Full bool   `json:"full,omitempty"`
}

// Bounds of --auth-log: a client chooses the user name it sends, and a client refused again and
// again reconnects for as long as it runs.
const (
	maxLoggedUser   = 256
	maxAuthLogBytes = 16 << 20
)

// logAuthentications writes to w the user of every SASL authentication the cluster receives, up to
// maxAuthLogBytes, then one line with Full set and nothing more. The broker lets the request
// through unchanged: this only watches.
func logAuthentications(c *kfake.Cluster, w io.Writer) {
	logAuthenticationsUpTo(c, w, maxAuthLogBytes)
}

func logAuthenticationsUpTo(c *kfake.Cluster, w io.Writer, limit int) {
	var (
		mu      sync.Mutex
		written int
		full    bool
	)
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if user, ok := saslUser(req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes); ok {
			if len(user) > maxLoggedUser {
				user = user[:maxLoggedUser]
			}
			line, _ := json.Marshal(authEntry{User: user})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case full:
			case written+len(line)+1 > limit:
				full = true
				last, _ := json.Marshal(authEntry{Full: true})
				_, _ = w.Write(append(last, '\n'))
			default:
				n, _ := w.Write(append(line, '\n'))
				written += n
			}
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
