package extract

import (
	"context"
	"net/url"
	"regexp"
	"strings"
)

// TypeAPIDoc is the extract type of API documentation.
const TypeAPIDoc = "api_doc"

// APIDoc extracts the service name, endpoints (method, path, description),
// authentication method and base URL from API documentation: endpoint
// lines such as "GET /v1/payments — list payments" (in prose, lists,
// headings or tables). Deterministic: confidence 1.0.
type APIDoc struct{}

var _ Extractor = APIDoc{}

// Name returns "api_doc".
func (APIDoc) Name() string { return "api_doc" }

// SchemaVersion returns 1.
func (APIDoc) SchemaVersion() int { return 1 }

var (
	endpointRe = regexp.MustCompile("(?:^|[\\s|`*#(])(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)`?\\s*\\|?\\s*`?((?:https?://[^\\s`|)]+)|/[^\\s`|)]*)`?")
	urlRe      = regexp.MustCompile("https?://[^\\s`'\"<>)|\\]]+")
	h1Re       = regexp.MustCompile(`(?m)^#\s+(.+?)\s*$`)
	descSep    = regexp.MustCompile("^[\\s`]*(?:[-—–:|]+\\s*)+")
	nameLine   = regexp.MustCompile(`(?i)^(?:service|api|service name)\s*:\s*(.+)$`)
	versionSeg = regexp.MustCompile(`/v\d+`)
)

// authMethods are tried in order; the first whose pattern appears wins.
var authMethods = []struct {
	name string
	re   *regexp.Regexp
}{
	{"oauth2", regexp.MustCompile(`(?i)\boauth\s?2(\.0)?\b|\boauth\b|client credentials`)},
	{"mtls", regexp.MustCompile(`(?i)\bmtls\b|mutual tls|client certificate`)},
	{"hmac_signature", regexp.MustCompile(`(?i)\bhmac\b|request signature`)},
	{"bearer_token", regexp.MustCompile(`(?i)\bbearer\b|\bjwt\b|access token`)},
	{"api_key", regexp.MustCompile(`(?i)\bapi[ -_]?key\b|x-api-key`)},
	{"basic", regexp.MustCompile(`(?i)\bbasic auth(entication)?\b|authorization: basic`)},
	{"none", regexp.MustCompile(`(?i)no authentication|unauthenticated|public endpoint`)},
}

// CanHandle reports whether doc was detected as API docs or names at least
// two endpoints.
func (APIDoc) CanHandle(doc *Document) bool {
	return doc.ContentType == TypeAPIDoc || len(endpointRe.FindAllStringIndex(doc.Text, 3)) >= 2
}

// Extract returns one api_doc extract, or none without endpoints.
func (APIDoc) Extract(_ context.Context, doc *Document) ([]Extract, error) {
	ls := lines(doc.Text)
	type ep struct{ method, path, desc string }
	var eps []ep
	seen := map[string]bool{}
	start, end := len(doc.Text), 0
	for i, l := range ls {
		for _, m := range endpointRe.FindAllStringSubmatchIndex(l.text, -1) {
			method, path := l.text[m[2]:m[3]], strings.TrimRight(l.text[m[4]:m[5]], ".,;:")
			key := method + " " + path
			if seen[key] {
				continue
			}
			seen[key] = true
			desc := strings.TrimSpace(descSep.ReplaceAllString(l.text[m[1]:], ""))
			desc = strings.Trim(strings.TrimSpace(strings.Split(desc, "|")[0]), "`* ")
			if desc == "" {
				// The description is often the next line.
				for _, n := range ls[i+1 : min(i+3, len(ls))] {
					if s := strings.TrimSpace(n.text); s != "" && !endpointRe.MatchString(n.text) && !strings.HasPrefix(s, "#") && !strings.HasPrefix(s, "|") {
						desc = strings.Trim(s, "`*_ ")
						break
					}
				}
			}
			eps = append(eps, ep{method, path, desc})
			start, end = min(start, l.start), max(end, l.end)
		}
	}
	if len(eps) == 0 {
		return nil, nil
	}
	endpoints := make([]any, len(eps))
	for i, e := range eps {
		m := map[string]any{"method": e.method, "path": e.path}
		if e.desc != "" {
			m["description"] = e.desc
		}
		endpoints[i] = m
	}
	data := map[string]any{"endpoints": endpoints}
	if name := serviceName(doc); name != "" {
		data["service_name"] = name
	}
	if base := baseURL(doc.Text, ls); base != "" {
		data["base_url"] = base
	} else {
		for _, e := range eps {
			if u, err := url.Parse(e.path); err == nil && u.Host != "" {
				data["base_url"] = u.Scheme + "://" + u.Host
				break
			}
		}
	}
	if auth := authMethod(doc.Text); auth != "" {
		data["auth_method"] = auth
	}
	return []Extract{{Type: TypeAPIDoc, Data: data, Confidence: 1, SpanStart: start, SpanEnd: end}}, nil
}

func serviceName(doc *Document) string {
	for _, l := range lines(doc.Text) {
		s := strings.TrimSpace(l.text)
		if m := nameLine.FindStringSubmatch(s); m != nil {
			return strings.Trim(m[1], "`*_ ")
		}
	}
	if m := h1Re.FindStringSubmatch(doc.Text); m != nil {
		return strings.Trim(m[1], "`*_ ")
	}
	return strings.TrimSpace(doc.Title)
}

// baseURL takes the URL on (or right after) a "Base URL" line, else the
// first URL of the text that is not an endpoint.
func baseURL(text string, ls []lineSpan) string {
	for i, l := range ls {
		if strings.Contains(strings.ToLower(l.text), "base url") || strings.Contains(strings.ToLower(l.text), "base-url") {
			for _, n := range ls[i:min(i+3, len(ls))] {
				if u := urlRe.FindString(n.text); u != "" {
					return strings.TrimRight(u, ".,;:/")
				}
			}
		}
	}
	for _, l := range ls {
		if endpointRe.MatchString(l.text) {
			continue
		}
		if u := urlRe.FindString(l.text); u != "" && (strings.Contains(u, "api") || versionSeg.MatchString(u)) {
			return strings.TrimRight(u, ".,;:/")
		}
	}
	return ""
}

// authMethod prefers what an "Authentication" section says, else the whole
// text.
func authMethod(text string) string {
	var scoped strings.Builder
	for _, s := range sections(text) {
		if strings.Contains(s.heading, "auth") {
			for _, it := range s.items {
				scoped.WriteString(it.text + "\n")
			}
			scoped.WriteString(s.heading + "\n")
		}
	}
	for _, src := range []string{scoped.String(), text} {
		for _, a := range authMethods {
			if a.re.MatchString(src) {
				return a.name
			}
		}
	}
	return ""
}
