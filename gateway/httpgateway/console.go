package httpgateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles is the web console: a static page over the gateway's own
// REST/SSE API (console/console.js). It holds no data, so it is served
// without authentication; its API calls carry the key the user enters.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP lets the page load only its own files and call only this
// origin.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleHandler serves the console under /console/.
func consoleHandler() http.Handler { return staticHandler(consoleFiles, "console", "/console/") }

// apiDocsFiles is the API reference page (apidocs/docs.js renders
// /openapi.json), bundled at build time like the console, for the same
// reasons served without authentication and under the same policy.
//
//go:embed apidocs
var apiDocsFiles embed.FS

// apiDocsHandler serves the API reference under /docs/.
func apiDocsHandler() http.Handler { return staticHandler(apiDocsFiles, "apidocs", "/docs/") }

// staticHandler serves the embedded directory dir of files under prefix,
// with consoleCSP: its pages load only their own files and call only this
// origin.
func staticHandler(files embed.FS, dir, prefix string) http.Handler {
	sub, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	static := http.StripPrefix(prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	})
}
