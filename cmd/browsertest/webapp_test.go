package browsertest_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/cmd/internal/stacktest"
)

// onePixelPNG is a valid 1x1 PNG (the upload endpoint sniffs the bytes).
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

// TestWebAppSignIn: a refused token is explained on the sign-in screen; a
// dev URL pasted into the open tab (only the fragment changes) signs in.
func TestWebAppSignIn(t *testing.T) {
	chromiumPath(t)
	st := stacktest.Start(t, 1)
	srv, _ := newProxy(t, st)
	p := newPage(t, st)
	p.do("open the UI with a bad token", chromedp.Navigate(srv.URL+"/#token=not-a-real-token"))
	p.wait("the refusal", `!document.querySelector('[data-testid=login-error]')?.hidden && document.querySelector('[data-testid=login-error]').textContent.includes('refused')`)
	require.Contains(t, evalJS[string](p, `document.querySelector('[data-testid=login-error]').textContent`), "chatd token", "the refusal says how to get a token")
	require.True(t, evalJS[bool](p, `localStorage.getItem('chatd.token') === null && !location.href.includes('token')`), "a refused token is not kept")
	p.shot("refused")

	// A refused token typed in the box is explained too.
	p.fill(`[data-testid=token-input]`, "still-wrong")
	p.do("sign in", chromedp.Click(chromedp.CSS(`[data-testid=sign-in]`)))
	p.wait("the second refusal", `!document.querySelector('[data-testid=login-error]').hidden && !document.querySelector('[data-testid=sign-in]').disabled`)

	// Paste the dev URL into the address bar of the open tab.
	p.do("paste the dev URL", chromedp.Evaluate[chromedp.Void](`location.assign(`+jsString(srv.URL+"/#token="+st.Token)+`)`))
	p.wait("the signed-in app", `document.querySelector('[data-testid=new-chat]')?.offsetParent`)
	require.True(t, evalJS[bool](p, `localStorage.getItem('chatd.token') === `+jsString(st.Token)+` && !location.href.includes('token')`))

	// A whole dev URL pasted into the sign-in box works as well.
	p.do("sign out", chromedp.Click(chromedp.CSS(`[data-testid=sign-out]`)))
	p.wait("the sign-in screen", `document.querySelector('[data-testid=token-input]')`)
	p.fill(`[data-testid=token-input]`, srv.URL+"/#token="+st.Token)
	p.do("sign in", chromedp.Click(chromedp.CSS(`[data-testid=sign-in]`)))
	p.wait("the signed-in app", `document.querySelector('[data-testid=new-chat]')?.offsetParent`)
	require.Empty(t, p.exceptions())
}

// TestWebAppContent: markdown (GFM) renders sanitized, code is highlighted
// with a working copy button, reasoning is collapsed, an uploaded image is
// shown and acknowledged by the model, regenerate replaces the reply, and
// the chat list renames and searches.
func TestWebAppContent(t *testing.T) {
	u := startUI(t, "Markdown chat")
	p := u.p

	u.send("Look:\n\n**bold** and `inline`\n\n```go\nfunc main() { return }\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n\n<img src=x onerror=\"window.__pwned=1\"> <script>window.__pwned=2</script> [link](https://example.com)")
	last := `[...document.querySelectorAll('[data-testid=message][data-role=assistant]')].at(-1)`
	p.wait("the markdown reply", jsStatus+` === 'waiting' && `+last+`?.querySelector('strong')`)
	require.Equal(t, "bold", evalJS[string](p, last+`.querySelector('strong').textContent`))
	require.Equal(t, "inline", evalJS[string](p, last+`.querySelector('p code').textContent`))
	require.True(t, evalJS[bool](p, last+`.querySelector('[data-testid=code-block] code.hljs.language-go .hljs-keyword') !== null`), "the Go block is highlighted")
	require.Equal(t, 2, evalJS[int](p, last+`.querySelectorAll('table th').length`), "a GFM table")
	require.True(t, evalJS[bool](p, last+`.querySelector('input[type=checkbox][checked]') !== null`), "a GFM task list")
	require.True(t, evalJS[bool](p, `!window.__pwned && !document.querySelector('[data-testid=messages] img[src=x]') && !document.querySelector('[data-testid=messages] script')`),
		"raw HTML is not rendered")
	require.Equal(t, "noopener noreferrer nofollow", evalJS[string](p, last+`.querySelector('a[href="https://example.com"]').rel`))
	p.shot("markdown")

	// Copy: the button puts the code on the clipboard (stubbed: headless
	// chromium has no clipboard permission).
	require.True(t, evalJS[bool](p, `(() => { window.__copied = null; navigator.clipboard.writeText = async (t) => { window.__copied = t; }; return true; })()`))
	p.do("copy the code", chromedp.Click(chromedp.CSS(`[data-testid=message][data-role=assistant] [data-testid=code-block] [data-testid=copy-button]`)))
	p.wait("the copied code", `window.__copied === 'func main() { return }' && `+last+`.querySelector('[data-testid=code-block] [data-testid=copy-button]').textContent === 'Copied'`)

	// Reasoning is collapsed by default.
	u.send("::think pondering deeply\n::reply thought about it")
	p.wait("the reply with reasoning", jsStatus+` === 'waiting' && `+last+`?.querySelector('[data-testid=part-reasoning]')`)
	require.False(t, evalJS[bool](p, last+`.querySelector('[data-testid=part-reasoning]').open`), "reasoning starts collapsed")
	require.Contains(t, evalJS[string](p, last+`.querySelector('[data-testid=part-reasoning]').textContent`), "pondering deeply")

	// Upload an image with the attach button (the file input), see its
	// preview, send it and see the model acknowledge it.
	require.True(t, evalJS[bool](p, `(() => {
		const bytes = Uint8Array.from(atob(`+jsString(onePixelPNG)+`), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], 'dot.png', { type: 'image/png' }));
		const input = document.querySelector('[data-testid=file-input]');
		input.files = dt.files;
		input.dispatchEvent(new Event('change', { bubbles: true }));
		return true;
	})()`))
	p.wait("the uploaded attachment", `document.querySelector('[data-testid=pending-file]')?.dataset.state === 'uploaded'`)
	p.shot("attachment-preview")
	u.send("::files")
	p.wait("the acknowledged image", jsStatus+` === 'waiting' && `+last+`?.textContent.includes('dot.png')`)
	p.wait("the image in the transcript", `[...document.querySelectorAll('[data-testid=message][data-role=user] [data-testid=part-file] img')].some((i) => i.complete && i.naturalWidth === 1)`)
	p.shot("image")

	// Regenerate the last reply: it is replaced, not added.
	replies := evalJS[int](p, jsAssistants+`.length`)
	oldID := evalJS[string](p, last+`.dataset.id`)
	u.click("regenerate")
	p.wait("the regenerated reply", fmt.Sprintf(`%s === 'waiting' && %s.dataset.id !== %s && %s.length === %d`, jsStatus, last, jsString(oldID), jsAssistants, replies))
	require.Contains(t, evalJS[string](p, last+`.textContent`), "dot.png")

	// Rename the chat from the list, then find it by searching.
	u.newChat("Another chat")
	p.do("rename", chromedp.Click(chromedp.CSS(`[data-testid=chat-item]:not(.selected) [data-testid=rename-chat]`)))
	p.fill(`[data-testid=rename-input]`, "Renamed chat")
	u.click("rename-save")
	p.wait("the renamed chat", `[...document.querySelectorAll('[data-testid=chat-item]')].some((c) => c.textContent.includes('Renamed chat'))`)
	p.fill(`[data-testid=chat-search]`, "renamed")
	p.wait("the search result", `document.querySelectorAll('[data-testid=chat-item]').length === 1 && document.querySelector('[data-testid=chat-item]').textContent.includes('Renamed chat')`)
	require.NotEmpty(t, evalJS[string](p, `document.querySelector('[data-testid=chat-item] time').textContent`), "chats show a time")
	require.Empty(t, p.exceptions(), "uncaught exceptions in the page")
}

// TestWebAppReloadAndPhone: a reload mid-reply resumes the stream from the
// saved cursor (no doubled or missing text), and at 390 px wide the chat
// list is a drawer and the composer stays on screen.
func TestWebAppReloadAndPhone(t *testing.T) {
	u := startUI(t)
	p, px := u.p, u.px

	u.send("::stream 150 25")
	p.wait("the reply streaming", jsPreview+`.includes('tok5 ')`)
	before := len(px.streamCursors())
	p.do("reload", chromedp.Reload())
	p.wait("the app after the reload", `document.querySelector('[data-testid=preview]') && `+jsPreview+`.length > 0`)
	p.wait("the reply committed", jsStatus+` === 'waiting' && `+jsAssistants+`.length === 1 && `+jsPreview+` === ''`)
	require.Equal(t, []string{tokens(150)}, u.assistants(), "the reply is shown exactly once, whole")
	cursors := px.streamCursors()
	require.Greater(t, len(cursors), before)
	require.NotEmpty(t, cursors[before], "the reloaded page resumed from its saved cursor: %q", cursors)
	require.Equal(t, 1, evalJS[int](p, `document.querySelectorAll('[data-testid=message][data-role=user]').length`))

	// Phone width.
	p.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	p.wait("the phone layout", `getComputedStyle(document.querySelector('.sidebar')).position === 'fixed'`)
	require.True(t, evalJS[bool](p, `document.documentElement.scrollWidth <= innerWidth`), "no sideways scrolling at 390 px")
	require.True(t, evalJS[bool](p, `(() => { const r = document.querySelector('[data-testid=composer]').getBoundingClientRect(); return r.bottom <= innerHeight + 1 && r.top > innerHeight / 2; })()`),
		"the composer is pinned at the bottom")
	p.wait("the chat list hidden in a drawer", `document.querySelector('.sidebar').getBoundingClientRect().right <= 0`)
	p.shot("phone")
	u.send("::reply small screens work")
	p.wait("the reply", jsStatus+` === 'waiting' && `+jsAssistants+`.at(-1) === 'small screens work'`)
	p.do("open the drawer", chromedp.Click(chromedp.CSS(`.chat-header .menu`)))
	p.wait("the drawer", `document.querySelector('.sidebar').getBoundingClientRect().left >= 0`)
	p.shot("phone-drawer")

	// Dark mode.
	p.do("close the drawer", chromedp.Click(chromedp.CSS(`.brand .close`)))
	p.fill(`[data-testid=theme]`, "dark")
	p.wait("dark mode", `document.documentElement.dataset.theme === 'dark'`)
	p.do("desktop viewport", chromedp.EmulateViewport(1200, 900))
	p.shot("dark")
	require.Empty(t, p.exceptions(), "uncaught exceptions in the page")
}
