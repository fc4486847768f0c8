package gate

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Finding is one reason a lesson may not enter memory as it is.
type Finding struct {
	// Code names the rule: addresses_model, asks_for_secrets, foreign_tool, foreign_data,
	// unanchored (rules), or judge.
	Code    string  `msgpack:"code" json:"code"`
	Verdict Verdict `msgpack:"verdict" json:"verdict"`
	Reason  string  `msgpack:"reason" json:"reason"`
}

// Finding codes.
const (
	CodeAddressesModel = "addresses_model"
	CodeSecrets        = "asks_for_secrets"
	CodeForeignTool    = "foreign_tool"
	CodeForeignData    = "foreign_data"
	CodeUnanchored     = "unanchored"
	CodeJudge          = "judge"
)

// A phrase rule matches word sets in order, each within gap words of the one before, on the
// folded text; a set entry ending in "*" matches any word it starts. subs match anywhere in the
// folded text (scripts written without spaces, special tokens).
type phrase struct {
	code, what string
	sets       [][]string
	gap        int
	subs       []string
	// unlessNegated: a negation within three words before the match ("never print the
	// password") turns the match into advice, not a request.
	unlessNegated bool
}

var (
	overrideVerbs = []string{"ignore", "ignoring", "disregard*", "forget", "override", "overrule", "bypass", "discard", "neglect", "dismiss",
		// fr, es, it, pt, de, ru
		"ignorez", "ignorer", "oublie*", "ignora*", "olvida*", "esqueça", "esqueca", "ignoriere*", "vergiss", "vergesst", "missachte*",
		"игнорируй*", "игнорировать", "забудь*", "проигнорируй*"}
	controlObjects = []string{"instruction*", "prompt*", "guideline*", "directive*", "guardrail*", "programming", "training", "safety", "restriction*",
		"consigne*", "règle*", "regle*", "instrucci*", "regla*", "istruzion*", "regol*", "instruç*", "regra*",
		"anweisung*", "regeln", "vorgabe*", "richtlinie*", "инструкци*", "указани*", "правил*", "промпт*"}
	modelNouns    = []string{"ai", "assistant*", "llm*", "chatbot", "model", "gpt", "claude", "chatgpt"}
	discloseVerbs = []string{"reveal*", "leak*", "exfiltrat*", "disclos*", "expose", "dump*", "print*", "output", "display*", "echo",
		"show*", "tell", "share", "post", "upload*", "email", "repeat",
		"révèle*", "revele*", "affiche*", "montre*", "revela*", "muestra*", "mostra*", "rivela*",
		"zeige*", "verrate*", "покажи*", "раскрой*", "выведи*", "сообщи*"}
	secretNouns = []string{"password*", "passwd", "passphrase*", "secret*", "credential*", "apikey*", "api_key*", "cookie*",
		"api key*", "secret key*", "private key*", "access key*", "ssh key*", "environment variable*", "env var*", "auth token*",
		"access token*", "bearer token*", "session token*", "system prompt*", "hidden prompt*", "initial prompt*", "your prompt*", "your instruction*",
		"mot de passe", "clé*", "contraseña*", "contrasena*", "clave*", "passwort*", "schlüssel*", "kennwort*",
		"пароль*", "ключ*", "секрет*", "токен*"}
	negations = []string{"never", "not", "don", "dont", "doesn", "shouldn", "mustn", "avoid", "no", "without", "nie", "jamais", "nunca", "niemals", "никогда", "не"}
)

var phrases = []phrase{
	{code: CodeAddressesModel, what: "tells the model to set aside its instructions", sets: [][]string{overrideVerbs, controlObjects}, gap: 5},
	{code: CodeAddressesModel, what: "refers to the model's instructions", gap: 1, sets: [][]string{{"previous", "prior", "above", "earlier", "preceding", "original"}, {"instruction*", "prompt*", "directive*"}}},
	{code: CodeAddressesModel, what: "tells the model what it is", gap: 0, sets: [][]string{{"you", "u"}, {"are", "re", "r"},
		{"now", "no", "free", "allowed", "unrestricted", "an", "a", "the", "chatgpt", "claude", "gpt*", "dan", "jailbroken", "root", "admin*", "being", "henceforth"}}},
	{code: CodeAddressesModel, what: "tells the model to play a role", gap: 1, sets: [][]string{{"act", "behave", "pretend", "roleplay", "impersonate"}, {"as", "like", "you", "to"}}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 0, sets: [][]string{{"from"}, {"now"}, {"on"}}},
	{code: CodeAddressesModel, what: "gives the model new orders", gap: 1, sets: [][]string{{"new", "updated", "real", "true", "hidden", "secret", "override", "additional", "priority"}, {"instruction*", "orders", "directive*", "prompt*"}}},
	{code: CodeAddressesModel, what: "claims the authority of the system prompt", gap: 1, sets: [][]string{{"system", "developer", "admin", "administrator", "hidden", "initial"}, {"prompt*", "message*", "instruction*", "override*", "note*", "notice", "command*", "directive*", "says", "requires", "orders"}}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 1, sets: [][]string{{"dear", "hey", "hello", "attention", "hi"}, modelNouns}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 1, sets: [][]string{{"note", "message", "instructions", "memo"}, {"to", "for"}, modelNouns}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 0, sets: [][]string{{"as"}, {"an", "a"}, {"ai", "assistant", "llm", "language"}}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 1, sets: [][]string{{"your", "yours"}, {"instruction*", "prompt*", "rule*", "guideline*", "programming", "training", "creator*", "developer*", "system", "purpose", "original", "real", "true"}}},
	{code: CodeAddressesModel, what: "asks for a jailbreak mode", gap: 0, sets: [][]string{{"developer", "god", "jailbreak*", "dan", "sudo", "unrestricted"}, {"mode"}}},
	{code: CodeAddressesModel, what: "speaks to the model", gap: 2, sets: [][]string{{"whoever", "anyone", "ai", "assistant*", "model", "llm"}, {"reading", "reads", "processing"}, {"this"}}},
	{code: CodeAddressesModel, what: "a chat-template token or prompt tag", subs: []string{"<|", "|>", "[inst]", "[/inst]", "<<sys>>", "</guideline", "<guideline", "<system", "</system", "<instruction", "###instruction", "### instruction", "<tool_result", "<im_start", "<im_end"}},
	{code: CodeAddressesModel, what: "tells the model to set aside its instructions", subs: []string{"忽略", "无视", "無視", "忘记", "忘記", "系统提示", "系統提示", "システムプロンプト", "以前の指示", "前の指示", "무시", "이전 지시", "시스템 프롬프트", "你是", "あなたは"}},
	{code: CodeSecrets, what: "asks to disclose secrets", sets: [][]string{discloseVerbs, secretNouns}, gap: 6, unlessNegated: true},
	{code: CodeSecrets, what: "asks to disclose secrets", subs: []string{"密码", "密碼", "密钥", "密鑰", "秘钥", "パスワード", "秘密鍵", "비밀번호", "id_rsa", "/etc/shadow", "aws_secret_access_key"}},
}

// Role labels that turn the text into a turn of a conversation, and shouting that addresses the
// reader, on the normalised (not folded) text.
var (
	roleLabelRE = regexp.MustCompile(`(?i)(^|[\s.;,!?"'()\[\]{}<>*#|/-])(system|assistant|developer|administrator|admin|operator|sysadmin|root|ai|llm|model)\s*[:：>\]]`)
	turnLabelRE = regexp.MustCompile(`(?i)(^|[.!?]\s+|["'(\[]\s*)(user|human|instruction|instructions|important|note to self|attention)\s*[:：]`)
	shoutRE     = regexp.MustCompile(`\b(SYSTEM|OVERRIDE|ADMIN|INSTRUCTIONS?|IGNORE|JAILBREAK)\b`)
	urlRE       = regexp.MustCompile(`(?i)\b(?:https?|ftp|wss?)://[^\s"'<>` + "`" + `]+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b`)
)

var negationsFolded = func() []string {
	out := make([]string, len(negations))
	for i, n := range negations {
		out[i] = Fold(n)
	}
	return out
}()

type compiled struct {
	phrase
	sets [][]string
	subs []string
}

var compiledPhrases = func() []compiled {
	out := make([]compiled, 0, len(phrases))
	for _, p := range phrases {
		c := compiled{phrase: p}
		for _, set := range p.sets {
			var fs []string
			for _, w := range set {
				star := strings.HasSuffix(w, "*")
				f := Fold(strings.TrimSuffix(w, "*"))
				if star {
					f += "*"
				}
				fs = append(fs, f)
			}
			c.sets = append(c.sets, fs)
		}
		for _, s := range p.subs {
			c.subs = append(c.subs, Fold(s))
		}
		out = append(out, c)
	}
	return out
}()

// words splits folded text into words: runs of letters, digits, marks and the characters of
// identifiers; an entry of several words ("mot de passe") is matched against joined runs.
func words(folded string) []string {
	return strings.FieldsFunc(folded, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || r == '_')
	})
}

func matchWord(entry string, ws []string, i int) (int, bool) {
	parts := strings.Fields(entry)
	if len(parts) > 1 {
		if i+len(parts) > len(ws) {
			return 0, false
		}
		for k, p := range parts {
			if !matchOne(p, ws[i+k]) {
				return 0, false
			}
		}
		return len(parts), true
	}
	return 1, matchOne(entry, ws[i])
}

func matchOne(entry, w string) bool {
	if stem, ok := strings.CutSuffix(entry, "*"); ok {
		return strings.HasPrefix(w, stem)
	}
	return w == entry
}

// matchSets reports whether the sets occur in order in ws, each within gap words of the last
// (and, with unlessNegated, not right after a negation).
func matchSets(sets [][]string, gap int, ws []string, unlessNegated bool) bool {
	var from func(set, start, limit int) bool
	from = func(set, start, limit int) bool {
		if set == len(sets) {
			return true
		}
		for i := start; i < len(ws) && i <= limit; i++ {
			if set == 0 && unlessNegated && slices.ContainsFunc(ws[max(0, i-3):i], func(w string) bool { return slices.Contains(negationsFolded, w) }) {
				continue
			}
			for _, e := range sets[set] {
				if n, ok := matchWord(e, ws, i); ok && from(set+1, i+n, i+n+gap) {
					return true
				}
			}
		}
		return false
	}
	return from(0, 0, len(ws))
}

// Rules checks a lesson with the normalised rules alone; text is already normalised.
func Rules(l Lesson, text string) []Finding {
	var out []Finding
	add := func(code, reason string) {
		v := Reject
		if code != CodeAddressesModel && code != CodeSecrets {
			v = Quarantine
		}
		if !slices.ContainsFunc(out, func(f Finding) bool { return f.Code == code }) {
			out = append(out, Finding{Code: code, Verdict: v, Reason: reason})
		}
	}
	folded := strings.ToLower(Fold(text))
	ws := words(folded)
	for _, p := range compiledPhrases {
		if len(p.sets) > 0 && matchSets(p.sets, p.gap, ws, p.unlessNegated) {
			add(p.code, p.what)
		}
		for i, s := range p.subs {
			if strings.Contains(folded, s) {
				add(p.code, fmt.Sprintf("%s (%q)", p.what, p.phrase.subs[i]))
				break
			}
		}
	}
	if m := roleLabelRE.FindStringSubmatch(text); m != nil {
		add(CodeAddressesModel, fmt.Sprintf("a role label (%q) that reads as a turn of the conversation", strings.TrimSpace(m[2])))
	} else if m := turnLabelRE.FindStringSubmatch(text); m != nil {
		add(CodeAddressesModel, fmt.Sprintf("a role label (%q) that reads as a turn of the conversation", strings.TrimSpace(m[2])))
	}
	if m := shoutRE.FindString(text); m != "" {
		add(CodeAddressesModel, fmt.Sprintf("shouts %q at its reader", m))
	}
	out = append(out, scopeRules(l, text)...)
	return out
}

// toolToken matches identifiers shaped like tool names in normalised text.
var toolToken = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*(?:(?:_|__|-)[A-Za-z0-9]+)*`)

// scopeRules are the checks that do not depend on wording: a lesson is about the tools and data
// of its own session.
func scopeRules(l Lesson, text string) []Finding {
	var out []Finding
	own := union(l.Scope, l.Tools)
	if len(l.Known) > 0 {
		var foreign []string
		for _, tok := range toolToken.FindAllString(text, -1) {
			if slices.Contains(l.Known, tok) && !slices.Contains(own, tok) && !slices.Contains(foreign, tok) {
				foreign = append(foreign, tok)
			}
		}
		if len(foreign) > 0 {
			out = append(out, Finding{Code: CodeForeignTool, Verdict: Quarantine,
				Reason: fmt.Sprintf("names tool(s) %s that its source session did not use", strings.Join(foreign, ", "))})
		}
	}
	if l.Seen != nil {
		var foreign []string
		for _, u := range urlRE.FindAllString(text, -1) {
			h := hostOf(u)
			if h != "" && !slices.ContainsFunc(l.Seen, func(s string) bool { return strings.EqualFold(s, h) }) && !slices.Contains(foreign, h) {
				foreign = append(foreign, h)
			}
		}
		if len(foreign) > 0 {
			out = append(out, Finding{Code: CodeForeignData, Verdict: Quarantine,
				Reason: fmt.Sprintf("names address(es) %s that its source session's task and tool arguments never used", strings.Join(foreign, ", "))})
		}
	}
	if l.Source == SourceMined && l.Scope != nil && len(own) > 0 {
		anchored := false
		for _, tok := range toolToken.FindAllString(text, -1) {
			if slices.Contains(own, tok) {
				anchored = true
				break
			}
		}
		if !anchored {
			out = append(out, Finding{Code: CodeUnanchored, Verdict: Quarantine,
				Reason: fmt.Sprintf("a mined lesson must be about a tool of its session (%s) and names none", strings.Join(own, ", "))})
		}
	}
	return out
}

// Hosts returns the hosts and mail domains named in text (lower case), for Lesson.Seen.
func Hosts(text string) []string {
	var out []string
	for _, u := range urlRE.FindAllString(Normalize(text), -1) {
		if h := hostOf(u); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

func hostOf(s string) string {
	if at := strings.LastIndexByte(s, '@'); at >= 0 && !strings.Contains(s, "://") {
		return strings.ToLower(strings.TrimRight(s[at+1:], ".,;:)"))
	}
	u, err := url.Parse(strings.TrimRight(s, ".,;:)"))
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
