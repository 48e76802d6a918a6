package dlqcli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestUIOpensTheBrowserWithoutTheToken runs kubectl dlq ui with a desktop opener (xdg-open) that
// records its command line and environment, which every local user can read in /proc: neither holds
// the session token, and what they hold is worthless once the browser used it. The browser's part
// is played here: it follows what the opener got and is signed in, once.
func TestUIOpensTheBrowserWithoutTheToken(t *testing.T) {
	g := NewWithT(t)
	bin := t.TempDir()
	record := t.TempDir()
	// argv appears last, whole (mv): the test reads env once argv is there
	opener := `#!/bin/sh
env > "` + record + `/env"
for a in "$@"; do printf '%s\n' "$a"; done > "` + record + `/argv.tmp" && mv "` + record + `/argv.tmp" "` + record + `/argv"
`
	g.Expect(os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(opener), 0o755)).To(Succeed())
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: not-a-secret-of-this-test}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: shop}}]
current-context: none
`), 0o600)).To(Succeed())

	out, errOut := &syncBuffer{}, &syncBuffer{}
	o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan int, 1)
	go func() { done <- execute(ctx, o, []string{"--kubeconfig", kubeconfig, "ui"}) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	var printed string
	g.Eventually(func() string { printed = out.String(); return printed }, 30*time.Second, 20*time.Millisecond).Should(ContainSubstring("token="))
	token := regexp.MustCompile(`token=([A-Za-z0-9_-]+)`).FindStringSubmatch(printed)[1]
	var argv []byte
	g.Eventually(func() error { var err error; argv, err = os.ReadFile(filepath.Join(record, "argv")); return err },
		30*time.Second, 20*time.Millisecond).Should(Succeed(), "the opener did not run: %s", errOut.String())
	env, err := os.ReadFile(filepath.Join(record, "env"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("the opener's argv: %q", argv)
	g.Expect(string(argv)).NotTo(ContainSubstring(token), "the session token is in the opener's command line")
	g.Expect(string(env)).NotTo(ContainSubstring(token), "the session token is in the opener's environment")

	// the browser opens the file the opener got: a private page that signs in once
	args := strings.Split(strings.TrimSpace(string(argv)), "\n")
	g.Expect(args).To(HaveLen(1))
	page := args[0]
	info, err := os.Stat(page)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the sign-in page is the user's alone")
	dir, err := os.Stat(filepath.Dir(page))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dir.Mode().Perm()).To(Equal(os.FileMode(0o700)), "in a directory of the user's alone")
	html, err := os.ReadFile(page)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(html)).NotTo(ContainSubstring(token), "the page carries a one-time code, not the session token")
	action := regexp.MustCompile(`action="([^"]+)"`).FindSubmatch(html)
	code := regexp.MustCompile(`name="code" value="([^"]+)"`).FindSubmatch(html)
	g.Expect(action).NotTo(BeNil(), string(html))
	g.Expect(code).NotTo(BeNil(), string(html))

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	signIn := func(c *http.Client) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, string(action[1]), strings.NewReader(url.Values{"code": {string(code[1])}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "null") // a page opened from a file
		resp, err := c.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	status, body := signIn(browser)
	g.Expect(status).To(Equal(http.StatusOK), body)
	console := regexp.MustCompile(`url=([^"]+)"`).FindStringSubmatch(body)
	g.Expect(console).NotTo(BeNil(), body)
	target, err := url.Parse(string(action[1]))
	g.Expect(err).NotTo(HaveOccurred())
	home := target.ResolveReference(&url.URL{Path: console[1]})
	get, err := browser.Get(home.String())
	g.Expect(err).NotTo(HaveOccurred())
	get.Body.Close()
	g.Expect(get.StatusCode).NotTo(Equal(http.StatusUnauthorized), "the browser is signed in (the fake cluster answers nothing)")

	// used once, the page is gone and its code is worthless
	g.Eventually(func() bool { _, err := os.Stat(page); return os.IsNotExist(err) }, 10*time.Second, 20*time.Millisecond).Should(BeTrue())
	again, _ := signIn(&http.Client{})
	g.Expect(again).To(Equal(http.StatusUnauthorized), "a second use of the one-time code")
}
