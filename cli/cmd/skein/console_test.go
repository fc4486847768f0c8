package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// consoleScript: the task adds with the sum tool; the miner turns the session into a guideline.
const consoleScript = `
rules:
  - when: {system: "^skein-miner"}
    reply: {text: "Add numbers with the sum tool rather than by hand."}
  - when: {last: "^delegate"}
    reply:
      tool_calls:
        - {name: assistant, args: {task: "add 2, 3 and 5 with the sum tool"}}
  - when: {last: "^add"}
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - reply: {text: "The total is 10."}
`

// chromium finds the browser a console test drives: $SKEIN_CHROMIUM, else Debian's chromium
// (installed by `make console-setup`). Without one the test skips, except under CI (or
// SKEIN_REQUIRE_ALL=1), where a missing browser must fail rather than pass unseen; with -short
// it skips, since every console test runs the whole mesh and a browser.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the whole mesh and a browser")
	}
	if p := os.Getenv("SKEIN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	devtest.Missing(t, "chromium (Debian's package, which `make console-setup` installs; or set SKEIN_CHROMIUM)")
	return ""
}

// needMiniLM ends a test that runs memory in process unless `make setup` installed the model.
func needMiniLM(t *testing.T) {
	t.Helper()
	if !minilm.Installed(devenv.ToolsDir()) {
		devtest.Missing(t, "the all-MiniLM-L6-v2 embedder")
	}
}

// screenshotDir is where the console test saves its screenshots: $SKEIN_CONSOLE_SCREENSHOTS
// (`make console-screenshots` points it at docs/), else a temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("SKEIN_CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// consoleMesh is a whole embedded mesh (`skein up` in process) running the scripted model,
// whose console a browser test drives.
type consoleMesh struct {
	c     *bus.Conn // an admin's connection
	names protocol.Names
	addr  string // the console's HTTP address
	token string // the HTTP API's token
}

// startConsoleMesh starts cfg's mesh (nil: the default without memory or miner) with script as
// the scripted model's rules and the console on a free address, until the test ends, and
// returns once the console answers.
func startConsoleMesh(ctx context.Context, t *testing.T, cfg *config.Config, script string) *consoleMesh {
	t.Helper()
	if cfg == nil {
		cfg = config.Default()
		cfg.Memory.Enabled, cfg.Miner.Enabled = false, false
	}
	useScript(t, cfg, script)
	home, addr := filepath.Join(t.TempDir(), "home"), freeAddr(t)
	c := connAs(t, upInProcess(ctx, t, cfg, home, meshLogger(), addr), auth.Admin)
	tok, _, err := gateway.HTTPToken(home, "")
	if err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, "http://"+addr+"/console/")
	return &consoleMesh{c: c, names: protocol.NewNames(cfg.Mesh.Namespace), addr: addr, token: tok}
}

// page is a tab of headless Chromium.
type page struct {
	t   *testing.T
	ctx context.Context
}

// openBrowser starts the headless Chromium at path with a window of width by height pixels,
// until ctx ends or the test does.
func openBrowser(ctx context.Context, t *testing.T, path string, width, height int) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(width, height),
		chromedp.Flag("disable-dev-shm-usage", true)) // containers often have a tiny /dev/shm
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	// The first Run starts the browser: it must not carry a timeout (see chromedp.Run).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return &page{t: t, ctx: bctx}
}

// fail ends the test with what the page showed, so a failure in CI can be read without the
// browser.
func (p *page) fail(what string, err error) {
	p.t.Helper()
	body, _ := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS("body")))
	loc, _ := chromedp.Run(p.ctx, chromedp.Location())
	p.t.Fatalf("%s: %v\naddress %s\npage text:\n%s", what, err, loc, body)
}

// run does actions within a minute, or fails the test with what the page showed.
func (p *page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fail(what, err)
	}
}

// TestConsoleEndToEnd drives the console in headless Chromium against a whole embedded mesh
// (scripted model, sum tool, MiniLM memory, miner): the sessions page lists a finished session,
// its page shows the tree and the timeline with the retrieved guideline and why, and the
// miner's decision; memory search ranks the entries; evicting one removes it from memoryd.
func TestConsoleEndToEnd(t *testing.T) {
	browser := chromium(t)
	needMiniLM(t)
	root := devtest.RepoRoot(t)
	buildSum(t, root)
	cfg := config.Default()
	cfg.Tools.ManifestDirs, cfg.Tools.Enabled = []string{filepath.Join(root, "examples", "tools")}, []string{"sum"}
	cfg.Tools.Agents = []string{cfg.Agent.Name} // the agent may delegate to a child session of itself
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cm := startConsoleMesh(ctx, t, cfg, consoleScript)
	c, names, addr, tok := cm.c, cm.names, cm.addr, cm.token
	agent := cfg.Agent.Name

	// Memory before the run: a guideline for the sum tool the task names, and an unrelated one.
	mem := memoryd.Client{NC: c.NC, Names: names, PerTry: 30 * time.Second}
	now := time.Now().UTC()
	const sumText, csvText = "Use the sum tool to add numbers; never add them by hand.", "Check that a CSV file exists before reading it."
	imp, err := mem.Import(ctx, protocol.MemoryImportRequest{Entries: []memory.Entry{
		{ID: "console-sum", Agent: agent, Text: sumText, Polarity: protocol.PolarityPattern, Tier: protocol.TierTactical, Tools: []string{"sum"},
			Sessions: []string{"earlier-1"}, Helpful: 1, Source: memory.SourceHuman, Status: memory.StatusActive, Created: now, Updated: now,
			Supersedes: []string{"console-old"}, History: []protocol.MemoryChange{{At: now, Event: protocol.ChangeSupersedes, Other: "console-old",
				Reason: "judged contradiction (adding by hand went wrong); evidence 5 vs 3"}}},
		{ID: "console-csv", Agent: agent, Text: csvText, Polarity: protocol.PolarityAvoid, Tier: protocol.TierTactical,
			Sessions: []string{"earlier-2"}, Source: memory.SourceHuman, Status: memory.StatusActive, Created: now, Updated: now},
	}})
	if err != nil || imp.Imported != 2 {
		t.Fatalf("import: %+v %v", imp, err)
	}
	session := runToMined(ctx, t, c, names, "add 2, 3 and 5 with the sum tool")
	parent := runToMined(ctx, t, c, names, "delegate the sum of 2, 3 and 5")
	// A dead letter as the DLQ forwarder records one: the console must show where it came from.
	dead := nats.NewMsg(names.DLQ(protocol.StreamWork))
	dead.Data = []byte("undecodable step")
	for k, v := range map[string]string{bus.HeaderDLQSubject: names.Work(agent), bus.HeaderDLQStream: names.Stream(protocol.StreamWork),
		bus.HeaderDLQSequence: "17", bus.HeaderDLQConsumer: names.ExecutorConsumer(agent), bus.HeaderDLQDeliveries: "5",
		bus.HeaderDLQReason: "max deliveries reached"} {
		dead.Header.Set(k, v)
	}
	if _, err := c.JS.PublishMsg(ctx, dead); err != nil {
		t.Fatal(err)
	}

	b := openBrowser(ctx, t, browser, 1366, 800)
	bctx, fail, step := b.ctx, b.fail, b.run
	shots := screenshotDir(t)
	text := func(sel string) string {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		// A list re-rendered between finding the node and reading it is read again.
		var v string
		var err error
		for try := 0; try < 3; try++ {
			if v, err = chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel))); err == nil {
				return v
			}
		}
		fail("text of "+sel, err)
		return v
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			fail("screenshot", err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// click finds and clicks the element in one step inside the page: the console re-renders its
	// lists every few seconds, so a node found by one protocol call may be gone by the next
	// (chromedp.Click's "Could not find node with given id").
	click := func(sel string) chromedp.Action[chromedp.Void] {
		return chromedp.PollFunction[chromedp.Void](`(sel) => {
			const e = document.querySelector(sel);
			if (!e || e.getClientRects().length === 0) return false;
			e.click();
			return true;
		}`, chromedp.WithPollingArgs(sel), chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))
	}

	row := fmt.Sprintf(`tr[data-session=%q]`, session)
	step("load the sessions page", chromedp.Navigate(consoleURL(addr, tok)), chromedp.WaitVisible(css(row)))
	if rowText := text(row); !strings.Contains(rowText, "success") || !strings.Contains(rowText, agent) {
		t.Errorf("session row %q: want the agent and outcome success", rowText)
	}
	if loc, err := chromedp.Run(bctx, chromedp.Location()); err != nil || strings.Contains(loc, tok) {
		t.Errorf("the token stayed in the address bar: %s %v", loc, err)
	}
	shot("console-sessions.png")
	// The list counts a session's tokens as its tree does (its own model calls), and shows its
	// child agents' and mining's apart.
	rowTokens := func(row string) (own, apart string) {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(() => {
			const td = document.querySelector(%s + ' td.tokens');
			return [td.firstChild.textContent, [...td.querySelectorAll('.apart')].map((e) => e.textContent).join('; ')];
		})()`, quoteJS(row))))
		if err != nil || len(v) != 2 {
			fail("tokens of "+row, err)
		}
		return v[0], v[1]
	}
	// sameTokens checks that the tree's root shows the row's token counts. It reads until they
	// are there: the tree is drawn again when the session's record changes (its mining ends),
	// and a node read while it is replaced reads as "".
	sameTokens := func(own string) {
		t.Helper()
		in, out, _ := strings.Cut(own, " / ")
		var root string
		if err := poll.Wait(10*time.Second, func() error {
			if root = text(`#d-tree > ul > li > div > div.muted`); !strings.Contains(root, in+" in / "+out+" out") {
				return fmt.Errorf("tree root %q", root)
			}
			return nil
		}); err != nil {
			t.Errorf("tree root %q: want the list's token counts %s", root, own)
		}
	}
	own, apart := rowTokens(row)
	if !strings.HasPrefix(apart, "mining ") || apart == "mining 0 / 0" {
		t.Errorf("row tokens %q, %q; want the session's own, and mining apart", own, apart)
	}
	// Live: a session that runs while the page is open appears without a reload.
	later := runToMined(ctx, t, c, names, "add 2, 3 and 5 again with the sum tool")
	step("see a new session appear", chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-session=%q]`, later))))

	step("open the session", click(row),
		chromedp.WaitVisible(css(`#d-events li[data-type="retrieval"] .guideline`)),
		chromedp.WaitVisible(css(`#d-events li[data-type="mined"]`)),
		chromedp.WaitVisible(css(`#d-tree li.step`)))
	if r := text(`#d-events li[data-type="retrieval"]`); !strings.Contains(r, sumText) || !strings.Contains(r, "why: tool sum named in the task") {
		t.Errorf("retrieval event %q: want the sum guideline and why it was chosen", r)
	}
	if m := text(`#d-events li[data-type="mined"]`); !strings.Contains(m, "Add numbers with the sum tool") || !strings.Contains(m, "added") {
		t.Errorf("mined event %q: want the miner's guideline and its decision", m)
	}
	if tree := text(`#d-tree`); !strings.Contains(tree, "success") || !strings.Contains(tree, "1 tool call") {
		t.Errorf("tree %q: want the session's outcome and its tool call", tree)
	}
	sameTokens(own)

	step("open a session that delegated to a child agent", click(`#back`),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-session=%q]`, parent))))
	own, apart = rowTokens(fmt.Sprintf(`tr[data-session=%q]`, parent))
	if !strings.Contains(apart, "child agents ") || !strings.Contains(apart, "mining ") {
		t.Errorf("parent row tokens %q, %q; want its child agents' and mining apart", own, apart)
	}
	step("open it", click(fmt.Sprintf(`tr[data-session=%q]`, parent)),
		chromedp.WaitVisible(css(`#d-tree li.child .link`)))
	sameTokens(own)
	child, err := chromedp.Run(bctx, chromedp.AttributeValue(css(`#d-tree li.child`), "data-child"))
	if err != nil || child.Value == "" {
		t.Fatalf("child node: %+v %v", child, err)
	}
	if tree := text(`#d-tree`); !strings.Contains(tree, "assistant") || strings.Count(tree, "success") < 2 {
		t.Errorf("tree %q: want the parent and its child agent, both successful", tree)
	}
	shot("console-tree.png")
	step("follow the child", click(`#d-tree li.child .link`),
		chromedp.WaitVisible(css(`#d-events li[data-type="tool_call"]`)))
	if title := text(`#d-title`); title != child.Value {
		t.Errorf("clicking the child opened %q; want %q", title, child.Value)
	}

	step("search memory", click(`nav a[data-view="memory"]`),
		chromedp.WaitVisible(css(`#m-rows tr[data-entry]`)),
		chromedp.SendKeys(css(`#m-q`), "is the csv file there before I read it"),
		click(`#m-search button`),
		chromedp.WaitVisible(css(`#m-rows tr[data-entry] .why`)))
	first, err := chromedp.Run(bctx, chromedp.AttributeValue(css(`#m-rows tr:first-child`), "data-entry"))
	if err != nil || first.Value != "console-csv" {
		t.Errorf("first search hit %q (%v); want console-csv", first.Value, err)
	}
	shot("console-memory.png")

	step("evict an entry with confirmation", click(`tr[data-entry="console-csv"] button.evict`),
		chromedp.WaitVisible(css(`#confirm`)),
		click(`#confirm-yes`),
		chromedp.WaitNotPresent(css(`tr[data-entry="console-csv"]`)))
	if _, err := mem.Get(ctx, "console-csv"); err == nil || !strings.Contains(err.Error(), memory.ErrNotFound.Error()) {
		t.Errorf("after evicting in the console, memoryd get: %v; want not found", err)
	}
	if e, err := mem.Get(ctx, "console-sum"); err != nil || e.Status != memory.StatusActive {
		t.Errorf("the other entry: %+v %v", e, err)
	}
	// A rule's history and links: what it replaced, when and why.
	step("a rule's history", click(`tr[data-entry="console-sum"] details.history summary`),
		chromedp.WaitVisible(css(`tr[data-entry="console-sum"] details.history li`)))
	if h := text(`tr[data-entry="console-sum"] details.history`); !strings.Contains(h, "supersedes") || !strings.Contains(h, "evidence 5 vs 3") {
		t.Errorf("history %q: want the supersession and its reason", h)
	}
	if l := text(`tr[data-entry="console-sum"] td:nth-child(4)`); !strings.Contains(l, "supersedes console-") {
		t.Errorf("entry %q: want the link to the rule it supersedes", l)
	}

	step("usage charts", click(`nav a[data-view="usage"]`), chromedp.WaitVisible(css(`#u-tokens-model svg rect`)))
	if legend := text(`#u-tokens-model .legend`); !strings.Contains(legend, cfg.LLM.Model) {
		t.Errorf("tokens-by-model legend %q: want model %s", legend, cfg.LLM.Model)
	}
	shot("console-usage.png")

	step("dead letters", click(`nav a[data-view="dlq"]`), chromedp.WaitVisible(css(`#q-rows tr td.mono`)))
	if d := text(`#q-rows tr`); !strings.Contains(d, names.Work(agent)) || !strings.Contains(d, "#17") || !strings.Contains(d, "max deliveries reached") {
		t.Errorf("dead letter row %q: want its origin subject, sequence and reason", d)
	}

	step("search the sessions", click(`nav a[data-view="sessions"]`),
		chromedp.WaitVisible(css(row)),
		chromedp.SendKeys(css(`#s-q`), "delegate"),
		chromedp.WaitNotPresent(css(row)),
		chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-session=%q]`, parent))))
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	poll.Eventually(t, bustest.ReadyTimeout, "the console at "+url, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}
