package browsertest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// JavaScript snippets over the page's data-testid elements.
const (
	jsStatus     = `document.querySelector('[data-testid=chat-status]')?.textContent`
	jsPreview    = `(document.querySelector('[data-testid=preview]')?.hidden !== false ? '' : [...document.querySelectorAll('[data-testid=preview-text]')].map(n => n.textContent).join(''))`
	jsAssistants = `[...document.querySelectorAll('[data-testid=message][data-role=assistant]')].map(m => [...m.querySelectorAll('[data-testid=part-text]')].map(n => n.textContent).join(''))`
	// jsRecorder records, on every DOM change of the chat, each new preview
	// text, so a test can check what the user saw while a reply streamed.
	jsRecorder = `window.__rec = { previews: [] };
		new MutationObserver(() => {
			const t = ` + jsPreview + `;
			const r = window.__rec.previews;
			if (t && t !== r[r.length - 1]) r.push(t);
		}).observe(document.getElementById('chat'), { subtree: true, childList: true, characterData: true, attributes: true });
		true`
)

// ui is a signed-in page on a fresh stack with one new chat selected.
type ui struct {
	t   *testing.T
	st  *stacktest.Stack
	px  *proxy
	p   *page
	url string
}

// startUI signs in with #token= (the token must move to localStorage and
// leave the address bar) and creates a chat with the given New chat
// options (title, dynamic tools JSON; "" for none).
func startUI(t *testing.T, newChat ...string) *ui {
	t.Helper()
	u := openUI(t)
	u.newChat(newChat...)
	return u
}

// openUI signs in on a fresh stack and waits for the signed-in app.
func openUI(t *testing.T) *ui {
	t.Helper()
	chromiumPath(t) // fail early and clearly without a browser
	return openUIOn(t, stacktest.Start(t, 1))
}

// openUIOn signs in on st as st.Token and waits for the signed-in app.
func openUIOn(t *testing.T, st *stacktest.Stack) *ui {
	t.Helper()
	srv, px := newProxy(t, st)
	p := newPage(t, st)
	p.px = px
	p.do("open the UI", chromedp.Navigate(srv.URL+"/#token="+st.Token))
	p.wait("the signed-in UI", `document.querySelector('[data-testid=new-chat]')?.offsetParent`)
	require.True(t, evalJS[bool](p, `localStorage.getItem('chatd.token') === `+jsString(st.Token)+` && !location.href.includes('token')`),
		"the token is stored and removed from the address bar")
	return &ui{t: t, st: st, px: px, p: p, url: srv.URL}
}

// newChat creates a chat from the sidebar and waits until it is selected,
// waiting and live.
func (u *ui) newChat(opts ...string) {
	u.t.Helper()
	before := evalJS[int](u.p, `document.querySelectorAll('[data-testid=chat-item]').length`)
	steps := []chromedp.Action[chromedp.Void]{}
	if len(opts) > 0 && evalJS[bool](u.p, `!document.querySelector('.new-chat details').open`) {
		steps = append(steps, chromedp.Click(chromedp.CSS(`.new-chat summary`)))
	}
	u.p.do("open the options", steps...)
	if len(opts) > 0 && opts[0] != "" {
		u.p.fill(`[data-testid=new-chat-title]`, opts[0])
	}
	if len(opts) > 1 && opts[1] != "" {
		u.p.fill(`[data-testid=new-chat-tools]`, opts[1])
	}
	u.p.do("create a chat", chromedp.Click(chromedp.CSS(`[data-testid=new-chat]`)))
	u.p.wait("the new chat, waiting and live", fmt.Sprintf(`%s === 'waiting' && document.querySelector('[data-testid=conn-state]')?.dataset.state === 'live' && document.querySelectorAll('[data-testid=chat-item]').length === %d && document.querySelectorAll('[data-testid=message]').length === 0`, jsStatus, before+1))
}

// send types a message (multi-line text is pasted) and clicks Send.
func (u *ui) send(text string) {
	u.t.Helper()
	input := chromedp.CSS(`[data-testid=composer-input]`)
	if strings.Contains(text, "\n") {
		u.p.fill(`[data-testid=composer-input]`, text)
	} else {
		u.p.do("type "+text, chromedp.SendKeys(input, text))
	}
	u.p.do("send "+text, chromedp.Click(chromedp.CSS(`[data-testid=send-button]`)))
	u.p.wait("the composer emptied", `document.querySelector('[data-testid=composer-input]').value === ''`)
}

func (u *ui) assistants() []string { return evalJS[[]string](u.p, jsAssistants) }

func (u *ui) click(testID string) {
	u.t.Helper()
	u.p.do("click "+testID, chromedp.Click(chromedp.CSS(`[data-testid=`+testID+`]`)))
}

// TestWebUIChat drives the UI in chromium against the four services:
// sign in from the URL fragment, create a chat, watch a streamed reply grow
// and commit, stop a long reply, and survive dropped stream connections
// without doubled text.
func TestWebUIChat(t *testing.T) {
	u := startUI(t)
	p, px := u.p, u.px
	send, assistants := u.send, u.assistants
	require.True(t, evalJS[bool](p, jsRecorder))
	// checkPreviews: every preview the user saw was a prefix of the reply,
	// growing, never doubled.
	checkPreviews := func(reply string, atLeast int) {
		t.Helper()
		previews := evalJS[[]string](p, `window.__rec.previews.splice(0)`)
		require.GreaterOrEqual(t, len(previews), atLeast, "the reply streamed in pieces: %q", previews)
		for i, pv := range previews {
			require.True(t, strings.HasPrefix(reply, pv), "preview %d %q is not a prefix of the reply %q", i, pv, reply)
			if i > 0 {
				require.Greater(t, len(pv), len(previews[i-1]), "the preview only grows: %q", previews)
			}
		}
	}

	// A streamed reply grows in the preview, then the committed message
	// replaces it.
	send("::stream 30 10")
	p.wait("streamed text", jsPreview+`.includes('tok3 ')`)
	p.shot("streaming")
	require.Empty(t, assistants(), "no committed reply yet")
	p.wait("the committed reply", jsStatus+` === 'waiting' && `+jsAssistants+`.length === 1 && `+jsPreview+` === ''`)
	require.Equal(t, []string{tokens(30)}, assistants())
	checkPreviews(tokens(30), 3)

	// Stop a long reply: the chat returns to waiting and keeps the partial
	// reply, once.
	send("::stream 400 20")
	p.wait("the long reply streaming", jsPreview+`.includes('tok5 ')`)
	u.click("stop-button")
	p.wait("waiting after the stop", jsStatus+` === 'waiting' && `+jsAssistants+`.length === 2 && `+jsPreview+` === ''`)
	partial := assistants()[1]
	require.True(t, strings.HasPrefix(partial, "tok1 tok2 tok3 tok4 tok5") && strings.HasPrefix(tokens(400), partial) && len(partial) < len(tokens(400)),
		"the partial reply is kept: %q", partial)
	checkPreviews(tokens(400), 2)

	// Reconnect mid-reply twice, once cut by the network (the proxy) and
	// once by the page, and see the reply exactly once.
	send("::stream 120 20")
	p.wait("the reply streaming", jsPreview+`.includes('tok5 ')`)
	connects := evalJS[int](p, `window.__chatd.connects`)
	require.Positive(t, px.dropStreams(), "a stream was open")
	p.wait("a reconnect after the proxy cut the stream", fmt.Sprintf(`window.__chatd.connects > %d && %s.includes('tok20 ')`, connects, jsPreview))
	p.do("drop the stream from the page", chromedp.Evaluate[chromedp.Void](`window.__chatd.dropStream()`))
	p.wait("a reconnect after the page dropped the stream", fmt.Sprintf(`window.__chatd.connects > %d`, connects+1))
	require.Len(t, assistants(), 2, "the reply committed before the reconnects were done; make the stream slower")
	p.wait("the committed reply", jsStatus+` === 'waiting' && `+jsAssistants+`.length === 3 && `+jsPreview+` === ''`)
	require.Equal(t, tokens(120), assistants()[2], "the reply is shown exactly once, whole")
	checkPreviews(tokens(120), 3)
	cursors := px.streamCursors()
	require.GreaterOrEqual(t, len(cursors), 3)
	for _, c := range cursors[len(cursors)-2:] {
		require.NotEmpty(t, c, "the reconnects resumed from the last cursor: %q", cursors)
	}

	// Archive, after confirming: the chat leaves the list and the view.
	u.click("archive-chat")
	p.wait("the confirmation", `document.querySelector('[data-testid=archive-confirm]')`)
	p.shot("archive-confirm")
	u.click("confirm-archive")
	p.wait("the archived chat", `document.querySelectorAll('[data-testid=chat-item]').length === 0 && document.querySelector('[data-testid=chat-title]').textContent === 'No chat selected'`)

	require.Empty(t, p.exceptions(), "uncaught exceptions in the page")
}

// TestWebUIQueueEditRetryTools covers the rest of the chat controls: queue,
// delete and promote a message while a reply streams, send with interrupt,
// edit a message, watch a retry countdown and a fatal error, and answer a
// dynamic tool call.
func TestWebUIQueueEditRetryTools(t *testing.T) {
	u := startUI(t)
	p := u.p
	queued := `document.querySelectorAll('[data-testid=queued-message]')`
	last := jsAssistants + `.at(-1)`

	// Queue while busy, delete it; queue another and promote it.
	u.send("::stream 300 20")
	p.wait("the reply streaming", jsPreview+`.includes('tok3 ')`)
	p.wait("the busy choice", `!document.querySelector('[data-testid=busy-behavior]').hidden`)
	require.Equal(t, "queue", evalJS[string](p, `document.querySelector('[data-testid=busy-behavior]').value`))
	u.send("::reply first queued")
	p.wait("the queued message", queued+`.length === 1 && `+queued+`[0].textContent.includes('::reply first queued')`)
	p.shot("queue")
	u.click("queue-delete")
	p.wait("the queue emptied", queued+`.length === 0 && document.querySelector('[data-testid=queue]').hidden`)
	u.send("::reply promoted")
	p.wait("the queued message", queued+`.length === 1`)
	u.click("queue-promote")
	p.wait("the promoted message answered", jsStatus+` === 'waiting' && `+last+` === 'promoted' && `+queued+`.length === 0`)

	// Send with "interrupt" while busy.
	u.send("::stream 300 20")
	p.wait("the reply streaming", jsPreview+`.includes('tok3 ')`)
	p.fill(`[data-testid=busy-behavior]`, "interrupt")
	u.send("::reply interrupted it")
	p.wait("the interrupting message answered", jsStatus+` === 'waiting' && `+last+` === 'interrupted it' && `+queued+`.length === 0`)

	// Edit the first message: what followed it goes, the new reply comes.
	// The button is clicked as an element, not at its coordinates: a mouse
	// click lands where the button was when it was scrolled into view, and
	// the list follows the reply to its bottom on a re-render that comes
	// before the scroll event reaches the page (the click then hits
	// whatever is there now).
	require.True(t, evalJS[bool](p, `(() => { const b = document.querySelector('[data-testid=message][data-role=user] [data-testid=edit-message]'); b?.click(); return !!b })()`),
		"the first message has an Edit button")
	// The edit fills the composer when the UI has handled the click.
	p.wait("the message in the composer", `document.querySelector('[data-testid=composer-input]').value === '::stream 300 20'`)
	p.fill(`[data-testid=composer-input]`, "::reply edited")
	u.click("send-button")
	p.wait("the edited history", jsStatus+` === 'waiting' && JSON.stringify(`+jsAssistants+`) === '["edited"]' && document.querySelectorAll('[data-testid=message][data-role=user]').length === 1`)

	// A retryable failure shows a countdown, then the reply.
	u.send("::fail retryable 1\n::reply recovered")
	p.wait("the retry countdown", `!document.querySelector('[data-testid=retry-banner]').hidden && document.querySelector('[data-testid=retry-banner]').textContent.includes('Retrying')`)
	p.shot("retry-banner")
	p.wait("the recovered reply", jsStatus+` === 'waiting' && `+last+` === 'recovered' && document.querySelector('[data-testid=retry-banner]').hidden`)

	// A fatal failure shows the error.
	u.send("::fail fatal")
	p.wait("the error", jsStatus+` === 'error' && !document.querySelector('[data-testid=error-banner]').hidden && document.querySelector('[data-testid=error-banner]').textContent.length > 7`)
	p.shot("error-banner")

	// A dynamic tool call waits for the user's result.
	u.newChat("tools", `[{"name":"lookup","description":"Look something up","input_schema":{"type":"object"}}]`)
	u.send(`::tool lookup {"q":"x"}`)
	p.wait("the tool call form", jsStatus+` === 'requires_action' && document.querySelectorAll('[data-testid=tool-call]').length === 1`)
	p.shot("tool-call")
	require.Contains(t, evalJS[string](p, `document.querySelector('[data-testid=message][data-role=assistant] [data-testid=part-tool-call]')?.textContent ?? ''`), "lookup",
		"the tool call is shown in the transcript")
	p.fill(`[data-testid=tool-output]`, `{"answer":42}`)
	u.click("submit-tool-results")
	p.wait("the reply after the tool result", jsStatus+` === 'waiting' && `+last+` === 'done' && document.querySelector('[data-testid=action-required]').hidden`)
	require.Contains(t, evalJS[string](p, `document.querySelector('[data-testid=part-tool-result] pre').textContent`), "42")

	require.Empty(t, p.exceptions(), "uncaught exceptions in the page")
}
