package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// TestConsoleByKeyboardOnAPhone drives the console in headless Chromium at a phone's width
// (375 px) with the keyboard alone: it starts a task from the page, follows it to the session's
// address, cancels it there (through the same HTTP API and token as any client), goes back to
// the list, reaches the session's row with Tab and opens its tree with Enter; Back and Forward
// walk those views; no view scrolls the page sideways; the status filter offers every outcome.
func TestConsoleByKeyboardOnAPhone(t *testing.T) {
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The task thinks for far longer than the test lasts: only the cancel ends it.
	cm := startConsoleMesh(ctx, t, nil, "rules:\n  - delay_s: 600\n    reply: {text: \"too late\"}\n")
	c, names, addr, tok := cm.c, cm.names, cm.addr, cm.token
	b := openBrowser(ctx, t, browser, 500, 812)
	bctx, fail, run := b.ctx, b.fail, b.run
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			fail(js, err)
		}
		return v
	}
	// tabTo presses Tab until the keyboard's focus is on sel, and checks that the focus shows.
	tabTo := func(sel string) {
		t.Helper()
		for range 60 {
			run("press Tab", chromedp.KeyEvent(kb.Tab))
			if eval(fmt.Sprintf(`document.activeElement.matches(%s) ? 'yes' : ''`, quoteJS(sel))) == "yes" {
				if o := eval(`(() => { const s = getComputedStyle(document.activeElement); return s.outlineStyle + ' ' + s.outlineWidth; })()`); strings.HasPrefix(o, "none") || strings.HasSuffix(o, " 0px") {
					t.Errorf("focus on %s is not visible: outline %s", sel, o)
				}
				return
			}
		}
		fail("Tab never reached "+sel, fmt.Errorf("focus on %s", eval(`document.activeElement.outerHTML.slice(0, 200)`)))
	}
	enter := func(what string, waitFor string) {
		t.Helper()
		run(what, chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS(waitFor)))
	}
	// noSideScroll: at 375 px the page itself never scrolls sideways (a wide table scrolls in its box).
	noSideScroll := func(where string) {
		t.Helper()
		if w := eval(`innerWidth + ' ' + document.documentElement.scrollWidth`); w != "375 375" {
			t.Errorf("%s: viewport and page width %s; want 375 375 (no horizontal page scroll)", where, w)
		}
	}

	// The window cannot be made narrower than 500 px headless; the page is shown at 375 px as a
	// phone's browser would show it.
	run("load the console", chromedp.EmulateViewport(375, 812), chromedp.Navigate(consoleURL(addr, tok)), chromedp.WaitVisible(chromedp.CSS(`#s-rows`)))
	if loc, _ := chromedp.Run(bctx, chromedp.Location()); !strings.HasSuffix(loc, "#/sessions") {
		t.Errorf("address after loading %s; want the sessions view's #/sessions and no token", loc)
	}
	statuses, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#s-status option')].map((o) => o.value)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range protocol.Outcomes() {
		if !slices.Contains(statuses, string(o)) {
			t.Errorf("status filter %v lacks outcome %s", statuses, o)
		}
	}
	noSideScroll("sessions")

	// Start a task with the keyboard alone: its session's page opens at its own address.
	tabTo(`#t-task`)
	run("type a task", chromedp.KeyEvent("wait for the cancel"))
	tabTo(`#t-start`)
	enter("start the task", `#d-cancel`)
	id := strings.TrimPrefix(eval(`location.hash`), "#/session/")
	if !protocol.IDSession.Valid(id) || eval(`document.getElementById('d-title').textContent`) != id {
		t.Fatalf("after starting: address %q; want #/session/<the new session>", eval(`location.hash`))
	}
	noSideScroll("session")

	// Cancel it from its page: the confirmation starts on "Cancel" (the harmless answer).
	tabTo(`#d-cancel`)
	enter("ask to cancel", `#confirm`)
	if f := eval(`document.activeElement.id`); f != "confirm-no" {
		t.Errorf("the confirmation opened with focus on %q; want confirm-no", f)
	}
	tabTo(`#confirm-yes`)
	run("confirm the cancel", chromedp.KeyEvent(kb.Enter), chromedp.WaitNotVisible(chromedp.CSS(`#confirm`)))
	var outcome protocol.Outcome
	err = trace.Follow(ctx, c.JS, names, id, func(ev protocol.Event) bool {
		if ev.Type.Terminal() {
			outcome = ev.Outcome
		}
		return !(ev.Type == protocol.EvUsage)
	})
	if err != nil || outcome != protocol.OutcomeCancelled {
		t.Fatalf("session %s after the console's cancel: outcome %q, %v; want cancelled", id, outcome, err)
	}
	run("the tree shows it cancelled", chromedp.PollFunction[chromedp.Void](
		`() => document.querySelector('#d-tree .badge.cancelled') !== null`, chromedp.WithPollingInterval(50*time.Millisecond)))

	// Back to the list by keyboard, then to the session's tree again by Tab and Enter.
	tabTo(`#back`)
	row := fmt.Sprintf(`#s-rows tr[data-session=%q]`, id)
	enter("back to the list", row)
	if h := eval(`location.hash`); h != "#/sessions" {
		t.Errorf("after the back link: address %s; want #/sessions", h)
	}
	noSideScroll("sessions with a row")
	if png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot()); err != nil {
		t.Error(err)
	} else if err := os.WriteFile(filepath.Join(screenshotDir(t), "console-phone.png"), png, 0o644); err != nil {
		t.Error(err)
	}
	eval(`document.activeElement.blur(), ''`) // from the top of the page, as a newcomer would
	tabTo(row + ` a`)
	enter("open the session from its row", `#d-tree li`)
	if h := eval(`location.hash`); h != "#/session/"+id {
		t.Errorf("the row's link went to %s; want #/session/%s", h, id)
	}

	// The browser's Back and Forward walk the views.
	run("Back", chromedp.Evaluate[chromedp.Void](`history.back()`), chromedp.WaitVisible(chromedp.CSS(row)))
	if eval(`document.getElementById('session').hidden ? 'hidden' : ''`) != "hidden" {
		t.Error("after Back the session's view is still shown")
	}
	run("Forward", chromedp.Evaluate[chromedp.Void](`history.forward()`), chromedp.WaitVisible(chromedp.CSS(`#d-tree li`)))
	if eval(`document.getElementById('d-title').textContent`) != id {
		t.Errorf("after Forward the page shows %q; want session %s", eval(`document.getElementById('d-title').textContent`), id)
	}

	// A filter is part of the address: not_accomplished hides the cancelled session, cancelled shows it.
	run("filter by an outcome", chromedp.Evaluate[chromedp.Void](`location.hash = '#/sessions?status=not_accomplished'`),
		chromedp.WaitVisible(chromedp.CSS(`#s-count`)))
	err = poll.Wait(30*time.Second, func() error {
		if v := eval(`document.getElementById('s-status').value + ' ' + document.querySelectorAll('#s-rows tr').length`); v != "not_accomplished 0" {
			return fmt.Errorf("filter and rows %q", v)
		}
		return nil
	})
	if err != nil {
		fail("filter not_accomplished", err)
	}
	run("filter cancelled", chromedp.Evaluate[chromedp.Void](`location.hash = '#/sessions?status=cancelled'`), chromedp.WaitVisible(chromedp.CSS(row)))

	for _, v := range []string{"memory", "usage", "dlq", "learning"} {
		run("open "+v, chromedp.Evaluate[chromedp.Void](`location.hash = '#/`+v+`'`),
			chromedp.WaitVisible(chromedp.CSS(`#`+v)))
		noSideScroll(v)
	}
}
