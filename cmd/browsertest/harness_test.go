package browsertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatd/chatd/cmd/internal/stacktest"
	"github.com/chatd/chatd/pkg/webui"
)

// chromiumPath finds Debian's chromium. The test fails, never skips, without
// it: CI must install it (apt-get install -y chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found on PATH or at /usr/bin/chromium: the browser test needs it; install it with `apt-get install -y chromium`")
	return ""
}

// proxy is one origin for the page: the UI at /, the chat stream on the
// stream replica and the rest of /api/v2 on the api, as the dev stack and a
// production ingress serve them. It can cut every open stream.
type proxy struct {
	mu      sync.Mutex
	open    map[*http.Request]context.CancelFunc
	cursors []string // the Last-Event-ID of each stream request, in order
	// events counts the SSE events the streams carried, by type: a
	// failure says whether live parts reached the page at all.
	events map[string]int
	http.Handler
}

// eventCounter passes a stream's response through, counting its events.
type eventCounter struct {
	http.ResponseWriter
	p *proxy
}

func (c eventCounter) Write(b []byte) (int, error) {
	c.p.mu.Lock()
	for _, line := range strings.Split(string(b), "\n") {
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			c.p.events[typ]++
		}
	}
	c.p.mu.Unlock()
	return c.ResponseWriter.Write(b)
}

func (c eventCounter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// eventCounts is how many events of each type the streams carried.
func (p *proxy) eventCounts() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(p.events)
	return string(b)
}

func newProxy(t *testing.T, st *stacktest.Stack) (*httptest.Server, *proxy) {
	p := &proxy{open: map[*http.Request]context.CancelFunc{}, events: map[string]int{}}
	reverse := func(addr string) *httputil.ReverseProxy {
		rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
		rp.FlushInterval = -1
		return rp
	}
	api, stream := reverse(st.APIHTTP), reverse(st.Streams[0])
	mux := http.NewServeMux()
	mux.Handle("/", webui.Handler())
	mux.Handle("/api/v2/", api)
	mux.HandleFunc("/api/v2/chats/{chat}/stream", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		r = r.WithContext(ctx)
		p.mu.Lock()
		p.open[r] = cancel
		p.cursors = append(p.cursors, r.Header.Get("Last-Event-ID")+r.URL.Query().Get("cursor"))
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.open, r)
			p.mu.Unlock()
		}()
		stream.ServeHTTP(eventCounter{ResponseWriter: w, p: p}, r)
	})
	p.Handler = mux
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, p
}

// dropStreams cuts every open stream connection mid-response, as a network
// failure would (the reverse proxy aborts the response).
func (p *proxy) dropStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.open {
		cancel()
	}
	return len(p.open)
}

func (p *proxy) streamCursors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.cursors...)
}

// page is one browser tab on the UI.
type page struct {
	t       *testing.T
	ctx     context.Context
	st      *stacktest.Stack
	px      *proxy // the page's stream proxy, when it has one
	mu      sync.Mutex
	console []string
}

// newPage starts a headless chromium with a fresh profile and opens a tab.
func newPage(t *testing.T, st *stacktest.Stack) *page {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc) // runs before TempDir's cleanup: the browser is gone first
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, st: st}
	// The first action starts the browser, which lives as long as the
	// context of that action: no timeout here.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m.String())
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.fail("%s: %v", what, err)
	}
}

// wait polls a JavaScript condition on every animation frame.
func (p *page) wait(what, cond string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	for retries := 0; ; retries++ {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+cond+")", chromedp.WithPollingTimeout(60*time.Second)))
		if err == nil {
			return
		}
		// A poll does not survive the page's execution context changing
		// (e.g. right after a navigation): poll again in the new one.
		if ctx.Err() == nil && retries < 20 && strings.Contains(err.Error(), "context") {
			continue
		}
		p.fail("waiting for %s: %v", what, err)
	}
}

func evalJS[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// fail reports the page's state, its console and the services' logs.
func (p *page) fail(format string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		status: window.__chatd?.chat?.status, conn: window.__chatd?.chat?.conn, cursor: window.__chatd?.cursor,
		connects: window.__chatd?.connects, messages: document.querySelector('[data-testid=messages]')?.innerText,
		preview: document.querySelector('[data-testid=preview]')?.innerText,
		error: document.querySelector('[data-testid=error-banner]')?.innerText}, null, 1)`))
	p.mu.Lock()
	console := strings.Join(p.console, "\n")
	p.mu.Unlock()
	events := "(no proxy)"
	if p.px != nil {
		events = p.px.eventCounts()
	}
	p.t.Fatalf("%s\npage: %s\nstream events by type: %s\nconsole:\n%s\nworker:\n%s\nrelay:\n%s\nstream:\n%s\napi:\n%s",
		fmt.Sprintf(format, args...), state, events, console,
		p.st.Worker.Stderr(), p.st.Relay.Stderr(), p.st.StreamProcs[0].Stderr(), p.st.API.Stderr())
}

// exceptions lists the uncaught exceptions the page reported.
func (p *page) exceptions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.console {
		if strings.HasPrefix(m, "exception") {
			out = append(out, m)
		}
	}
	return out
}

// tokens is the scripted model's ::stream reply of n tokens.
func tokens(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("tok%d", i+1)
	}
	return strings.Join(parts, " ")
}

func jsString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fill sets an input's, textarea's or select's value the way typing would,
// so React (which listens for input and change events) sees it.
func (p *page) fill(sel, value string) {
	p.t.Helper()
	js := `(() => {
		const el = document.querySelector(` + jsString(sel) + `);
		if (!el) return false;
		const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : el instanceof HTMLSelectElement ? HTMLSelectElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, ` + jsString(value) + `);
		el.dispatchEvent(new Event('input', { bubbles: true }));
		el.dispatchEvent(new Event('change', { bubbles: true }));
		return true;
	})()`
	if !evalJS[bool](p, js) {
		p.fail("fill %s: no such element", sel)
	}
}

// shot saves a screenshot of the page as test-output/<test>-<name>.png
// (gitignored) for reviewers.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.fail("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll("test-output", 0o755); err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	file := filepath.Join("test-output", strings.ReplaceAll(p.t.Name(), "/", "_")+"-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
}
