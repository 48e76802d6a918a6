// Package dlqui is the dead-letter console behind kubectl dlq ui: a small web server on the
// loopback interface that shows a namespace's DeadLetterQueues, browses and opens their dead letters
// through the deadletters API, and changes them only by creating DeadLetterActions (a dry run
// first, to show what an action would match), all under the user's kubeconfig identity (Backend).
//
// The server acts with the user's credentials, so it is guarded like kubectl proxy and more: it
// binds loopback addresses only, answers only requests whose Host is the address it listens on (no
// DNS rebinding), requires a random per-session token (given once in the URL, or traded for a
// one-time code by the page the browser is opened on, then kept in a strict, HTTP-only cookie),
// checks the same token in every form it accepts (CSRF), and sends a Content-Security-Policy that
// allows only its own embedded assets (no CDN, no inline script).
//
// Cookies ignore ports: every server on 127.0.0.1 would receive a cookie set for the console, and
// a second console would replace the first one's. So each console serves everything under a random
// path of its own (Base, /<random>/), and its cookie has that Path: the browser sends it there
// only, never to another console nor to another local server.
//
// The files: server.go (the guarded server, its session and its routes), open.go (the browser
// opened on a private one-time sign-in page, never with the token on a command line), handlers.go
// and actions.go (the pages, and the actions' forms and progress), views.go (view models and SVG
// charts), samples.go (the sparklines' samples), filter.go ([Filter], from which both a list's options
// and an action's selector are made, so that they select the same dead letters; shared with the
// plugin), request.go ([ActionRequest], the one place the console and the plugin make a
// DeadLetterAction), backend.go ([Backend], every Kubernetes call, which internal/dlqcli implements
// with the plugin's clients), and templates/ and static/, embedded. The package imports the two API
// packages and no client: no client-go, no controller-runtime, no Kafka. It is tested on an
// in-memory Backend through httptest, and in a headless Chromium (chromedp).
package dlqui
