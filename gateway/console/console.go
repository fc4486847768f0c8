// Package console is the web console: a small static single page (HTML, CSS, vanilla JS, charts
// drawn as inline SVG) embedded in the binary, so it works offline and needs no build step. It
// talks only to the public HTTP API, with the bearer token the page is given in its URL fragment.
package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"

	"github.com/skein-mesh/skein/pkg/protocol"
)

//go:embed static
var files embed.FS

// Handler serves the console under /console/. Its files are public (the token never is); the
// headers keep the page from being framed by, or loading anything from, another origin.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	static := http.StripPrefix("/console/", http.FileServerFS(sub))
	vocab, err := json.Marshal(Vocabulary{SessionStatuses: protocol.SessionStatuses(), Outcomes: protocol.Outcomes()})
	if err != nil {
		panic(err) // two lists of strings
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// Refused as the API refuses: {error, code} with the code's status.
			c := protocol.CodeMethodNotAllowed
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.HTTPStatus())
			_ = json.NewEncoder(w).Encode(protocol.APIError{Error: "the console is read with GET", Code: c})
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/console/vocab.json" {
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(vocab)
			return
		}
		static.ServeHTTP(w, r)
	})
}

// Vocabulary is /console/vocab.json: the words the page offers as choices, taken from
// pkg/protocol so that a new outcome reaches the console's filter without editing the page.
type Vocabulary struct {
	SessionStatuses []protocol.SessionStatus `json:"session_statuses"`
	Outcomes        []protocol.Outcome       `json:"outcomes"`
}

// Favicon serves the console's icon at /favicon.ico, outside the token check like the console
// itself: browsers and other tools ask for it on their own, without a token.
func Favicon() http.Handler {
	icon, err := files.ReadFile("static/favicon.ico")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "image/x-icon")
		h.Set("Cache-Control", "public, max-age=86400")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(icon)
	})
}
