package dlqui

import (
	"crypto/subtle"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// OpenBrowser opens the console listening at hostport in the desktop's browser (xdg-open, open,
// or start on Windows) without putting the session token on any command line: the arguments of a
// process are public to every local user (/proc/PID/cmdline, ps), so the opener gets the path of a
// page written for the user alone (0600, in a private 0700 temporary directory) that signs in
// with a one-time code. The code is good once: the first sign-in consumes it and removes the page,
// and the page is removed when the console stops if no browser came. What stays in the opener's
// arguments is that path, worthless once used.
func (s *Server) OpenBrowser(hostport string) error {
	code, err := randomString(32)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kubectl-dlq-ui-")
	if err != nil {
		return err
	}
	page := filepath.Join(dir, "sign-in.html")
	if err := os.WriteFile(page, signInPage("http://"+hostport+s.path("login"), code), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	s.mu.Lock()
	old := s.signInDir
	s.signIn, s.signInDir = code, dir
	s.mu.Unlock()
	if old != "" {
		_ = os.RemoveAll(old)
	}
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", page)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", page)
	default:
		cmd = exec.Command("xdg-open", page)
	}
	if err := cmd.Start(); err != nil {
		s.removeSignIn()
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// signInPage posts the one-time code to the console's sign-in as soon as the browser opens it
// (a button when scripts are off).
func signInPage(action, code string) []byte {
	return fmt.Appendf(nil, `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>kubectl dlq ui: signing in</title></head>
<body>
<form method="post" action="%s">
<input type="hidden" name="code" value="%s">
<p>Signing in to the dead-letter console… <button type="submit">Continue</button></p>
</form>
<script>document.forms[0].submit();</script>
</body>
</html>
`, html.EscapeString(action), html.EscapeString(code))
}

// login trades the one-time code of the sign-in page for the session cookie, once. It answers with
// a page that moves on to the console itself rather than a redirect: the sign-in came from a file,
// another site for the browser, which would not send a strict cookie along a redirect from it.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	code := r.PostFormValue("code")
	s.mu.Lock()
	ok := s.signIn != "" && subtle.ConstantTimeCompare([]byte(code), []byte(s.signIn)) == 1
	if ok {
		s.signIn = ""
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "this sign-in page was used already or is not this console's: open the URL kubectl dlq ui printed", http.StatusUnauthorized)
		return
	}
	s.removeSignIn()
	s.setCookie(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = fmt.Fprintf(w, `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=%s"><title>Signed in · kubectl dlq ui</title>
<link rel="icon" href="%sstatic/favicon.svg" type="image/svg+xml"></head>
<body><p>Signed in. <a href="%s">Open the console</a>.</p></body>
</html>
`, s.base, s.base, s.base)
}

// removeSignIn removes the sign-in page, once used or when the console stops.
func (s *Server) removeSignIn() {
	s.mu.Lock()
	dir := s.signInDir
	s.signInDir = ""
	s.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
