package dlqui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// cookieName holds the session token once the URL's token was seen.
const cookieName = "dlq_console"

// Options configure a console.
type Options struct {
	// Backend makes every Kubernetes call.
	Backend Backend
	// Clock stamps the queue samples behind the growth sparklines; the real clock when nil.
	Clock clock.PassiveClock
	// Token is the session token; a random one when empty (tests set it).
	Token string
	// Base is the path prefix under which the console serves, /<something>/; a random one when
	// empty (tests set it).
	Base string
	// PollInterval is how often the pages poll a running action; 1s when zero.
	PollInterval time.Duration
}

// Server is the console's HTTP handler, guarded. Serve it with Listen and Serve, or with
// httptest in tests (the Host check then accepts the test server's address: see SetAddress).
type Server struct {
	backend Backend
	clock   clock.PassiveClock
	token   string
	base    string
	poll    time.Duration
	mux     *http.ServeMux
	samples *samples

	mu    sync.Mutex
	hosts map[string]bool
	// signIn is the one-time code of the page OpenBrowser wrote, "" once used; signInDir holds
	// that page, removed once used or when Serve ends.
	signIn    string
	signInDir string
}

// New returns a console for opts.
func New(opts Options) (*Server, error) {
	if opts.Backend == nil {
		return nil, errors.New("dlqui: no backend")
	}
	s := &Server{backend: opts.Backend, clock: opts.Clock, token: opts.Token, base: opts.Base, poll: opts.PollInterval}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.poll <= 0 {
		s.poll = time.Second
	}
	var err error
	if s.token == "" {
		if s.token, err = randomString(32); err != nil {
			return nil, fmt.Errorf("dlqui: a session token: %w", err)
		}
	}
	if s.base == "" {
		id, err := randomString(16)
		if err != nil {
			return nil, fmt.Errorf("dlqui: a base path: %w", err)
		}
		s.base = "/" + id + "/"
	}
	if !strings.HasPrefix(s.base, "/") || !strings.HasSuffix(s.base, "/") {
		return nil, fmt.Errorf("dlqui: base path %q: want /PREFIX/", s.base)
	}
	s.samples = newSamples(s.clock)
	s.mux = http.NewServeMux()
	s.routes()
	return s, nil
}

// randomString is n random bytes, base64url without padding.
func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Token is the session token, which the URL carries once.
func (s *Server) Token() string { return s.token }

// Base is the path under which the console serves: /<random>/.
func (s *Server) Base() string { return s.base }

// path is the console's path p (absolute within the console, "/queues/x") under its base.
func (s *Server) path(p string) string { return s.base + strings.TrimPrefix(p, "/") }

// SetAddress sets the host:port the server answers as: the Host header of every request must be it
// (or localhost with the same port).
func (s *Server) SetAddress(hostport string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts = map[string]bool{hostport: true}
	if _, port, err := net.SplitHostPort(hostport); err == nil {
		s.hosts[net.JoinHostPort("localhost", port)] = true
	}
}

// URL is the address to open: it carries the token, which the server trades for a cookie.
func (s *Server) URL(hostport string) string {
	return "http://" + hostport + s.base + "?token=" + url.QueryEscape(s.token)
}

// Listen binds address, which must be a loopback address (127.0.0.1:0 picks a free port), and
// sets the server's address to the one bound.
func (s *Server) Listen(address string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("--address %q: want HOST:PORT, for example 127.0.0.1:8001: %w", address, err)
	}
	if host == "localhost" {
		address = strings.Replace(address, "localhost", "127.0.0.1", 1)
	} else if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--address %q: the console acts with your credentials and listens on a loopback address only (127.0.0.1 or ::1)", address)
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	s.SetAddress(l.Addr().String())
	return l, nil
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	defer s.removeSignIn()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		return nil
	}
}

// ServeHTTP guards every request, then routes it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !s.hostAllowed(r.Host) {
		http.Error(w, "the console answers only at the address it listens on (Host "+r.Host+" refused)", http.StatusMisdirectedRequest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, s.base)
	if !ok {
		http.Error(w, "not found: open the URL kubectl dlq ui printed", http.StatusNotFound)
		return
	}
	if rest == "login" && r.Method == http.MethodPost {
		s.login(w, r)
		return
	}
	if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet {
		if !s.tokenOK(t) {
			http.Error(w, "wrong token: open the URL kubectl dlq ui printed", http.StatusUnauthorized)
			return
		}
		s.setCookie(w)
		q := r.URL.Query()
		q.Del("token")
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return
	}
	if !s.signedIn(r) {
		http.Error(w, "not signed in: open the URL kubectl dlq ui printed (it carries this session's token)", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if !s.sameOrigin(r) || !s.tokenOK(r.PostFormValue("csrf")) {
			http.Error(w, "refused: the form did not come from this console (CSRF check)", http.StatusForbidden)
			return
		}
	}
	// the pages route as if the console were at /
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = "/"+rest, ""
	r2.URL = &u
	s.mux.ServeHTTP(&baseWriter{ResponseWriter: w, base: s.base}, r2)
}

// baseWriter puts the base path before the redirects the router makes itself (a trailing slash
// added, a path cleaned), which it computes as if the console were at /.
type baseWriter struct {
	http.ResponseWriter
	base string
}

func (w *baseWriter) WriteHeader(code int) {
	if loc := w.Header().Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") && !strings.HasPrefix(loc, w.base) {
		w.Header().Set("Location", w.base+strings.TrimPrefix(loc, "/"))
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the server's writer.
func (w *baseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// setCookie keeps the session in a cookie scoped to the console's base path: HTTP-only, strict.
func (s *Server) setCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.token, Path: s.base, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// signedIn reports whether the request carries this console's session cookie.
func (s *Server) signedIn(r *http.Request) bool {
	for _, c := range r.Cookies() {
		if c.Name == cookieName && s.tokenOK(c.Value) {
			return true
		}
	}
	return false
}

func (s *Server) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}

func (s *Server) hostAllowed(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hosts[host]
}

// sameOrigin checks Origin (or, without it, Referer is not required: the token is) against the
// request's own host.
func (s *Server) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == ""
	}
	u, err := url.Parse(o)
	return err == nil && u.Scheme == "http" && s.hostAllowed(u.Host)
}
