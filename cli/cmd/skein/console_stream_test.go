package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// consoleStreamAnswer streams a word per 150 ms (about 4 s), after a second's thought, so the
// page is open before the first word.
const consoleStreamAnswer = "Streaming works: this answer reaches the console a word at a time, while the model is " +
	"still writing it, and the page shows it growing long before the turn ends."

// TestConsoleShowsTheAnswerGrow drives the console in headless Chromium while a session runs:
// the session's timeline shows the model's text growing, batch by batch, before the turn ends
// (no final event yet), and whole once it has.
func TestConsoleShowsTheAnswerGrow(t *testing.T) {
	browser := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cm := startConsoleMesh(ctx, t, nil, "rules:\n  - delay_s: 1\n    chunk_ms: 150\n    reply: {text: \""+consoleStreamAnswer+"\"}\n")
	c, names, addr, tok := cm.c, cm.names, cm.addr, cm.token
	b := openBrowser(ctx, t, browser, 1366, 800)
	bctx, run := b.ctx, b.run
	run("load the console", chromedp.Navigate(consoleURL(addr, tok)), chromedp.WaitVisible(chromedp.CSS(`#s-rows`)))

	var rep protocol.SubmitReply
	if err := bus.Request(ctx, c.NC, names.Submit(), &protocol.SubmitRequest{Task: "stream an answer", Caller: "test"}, &rep, 5*time.Second); err != nil || rep.Error != "" {
		t.Fatalf("submit: %v %s", err, rep.Error)
	}
	run("open the running session", chromedp.Evaluate[chromedp.Void]("openSession("+quoteJS(rep.SessionID)+")"))

	// streamed returns the streamed text once it is longer than n characters while the turn is
	// still running: its item is marked streaming and no final event has arrived.
	streamed := func(n int) string {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		s, err := chromedp.Run(sctx, chromedp.PollFunction[string](`(n) => {
			const li = document.querySelector('#d-events li[data-type="delta"]');
			if (!li || document.querySelector('#d-events li[data-type="final"]')) return false;
			const text = li.querySelector('.stream').textContent;
			return li.classList.contains('streaming') && text.length > n ? text : false;
		}`, chromedp.WithPollingArgs(n), chromedp.WithPollingInterval(20*time.Millisecond)))
		if err != nil {
			page, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#d-events")))
			t.Fatalf("the answer did not grow past %d characters before the turn ended: %v\ntimeline:\n%s", n, err, page)
		}
		return s
	}
	first := streamed(0)
	second := streamed(len(first))
	if !strings.HasPrefix(consoleStreamAnswer, first) || !strings.HasPrefix(consoleStreamAnswer, second) || second == consoleStreamAnswer {
		t.Fatalf("streamed %q then %q: want growing prefixes of the answer", first, second)
	}
	run("the turn ends", chromedp.WaitVisible(chromedp.CSS(`#d-events li[data-type="final"]`)))
	whole, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => {
		const li = document.querySelector('#d-events li[data-type="delta"]');
		return (li.classList.contains('streaming') ? 'still streaming: ' : '') + li.querySelector('.stream').textContent;
	})()`))
	if err != nil || whole != consoleStreamAnswer {
		t.Fatalf("after the turn: %q %v", whole, err)
	}
}

func quoteJS(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
