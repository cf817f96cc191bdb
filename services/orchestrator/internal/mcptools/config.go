package mcptools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Config is the MCP part of the orchestrator's configuration. Embed it with
// an empty env prefix.
type Config struct {
	// Servers is the per-tenant server configuration as JSON (see the
	// package documentation).
	Servers string `env:"ORCHESTRATOR_MCP_SERVERS" help:"MCP servers per tenant, as JSON mapping each tenant id to its servers: a stdio command (command, args, env) or a streamable HTTP url (url, headers); secret values are references, {env: VAR} or {file: /path}, never inline (see README, MCP)"`
	// ServersFile is a file holding the same JSON; it is read at start.
	ServersFile string `env:"ORCHESTRATOR_MCP_SERVERS_FILE" help:"file holding the ORCHESTRATOR_MCP_SERVERS JSON (e.g. a mounted ConfigMap); set one of the two"`
	// ConnectTimeout bounds starting a server and its handshake.
	ConnectTimeout time.Duration `env:"ORCHESTRATOR_MCP_CONNECT_TIMEOUT" default:"10s" help:"time limit to start an MCP server (or reach its URL), complete the handshake and list its tools; past it the server is reported failed and its tools are not offered"`
	// RetryAfter is how long a failed server is left alone.
	RetryAfter time.Duration `env:"ORCHESTRATOR_MCP_RETRY_AFTER" default:"30s" help:"after a failed connection, how long chat turns and analyses go on without the server before one of them tries it again (a call of one of its tools always tries at once)"`
}

// serverSpec is one configured MCP server.
type serverSpec struct {
	// Name is unique in its tenant and prefixes its tools' names.
	Name string `json:"name"`
	// Command, Args, Env and Dir start a stdio server.
	Command string           `json:"command"`
	Args    []string         `json:"args"`
	Env     map[string]Value `json:"env"`
	Dir     string           `json:"dir"`
	// URL and Headers reach a streamable HTTP server.
	URL     string           `json:"url"`
	Headers map[string]Value `json:"headers"`
}

// transport names how the server is reached, as ListTools reports it.
func (s serverSpec) transport() string {
	if s.Command != "" {
		return "stdio"
	}
	return "http"
}

// Value is a configured string: a JSON string is the value itself; an object
// {"env": "NAME"} or {"file": "/path"} refers to where a secret is, resolved
// each time a session is opened, so a rotated secret is used at the next
// connection and no secret sits in the configuration.
type Value struct {
	literal   string
	env, file string
}

// UnmarshalJSON accepts a string or an object with exactly one of env and file.
func (v *Value) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &v.literal)
	}
	var ref struct {
		Env  string `json:"env"`
		File string `json:"file"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ref); err != nil {
		return fmt.Errorf(`a value is a string, {"env": "NAME"} or {"file": "/path"}: %w`, err)
	}
	if (ref.Env == "") == (ref.File == "") {
		return errors.New(`a reference names exactly one of "env" and "file"`)
	}
	v.env, v.file = ref.Env, ref.File
	return nil
}

// resolve returns the value, reading the variable or file it refers to. A
// file's trailing line break is dropped, as a secret written by echo has one.
func (v Value) resolve(lookupEnv func(string) (string, bool)) (string, error) {
	switch {
	case v.env != "":
		s, ok := lookupEnv(v.env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", v.env)
		}
		return s, nil
	case v.file != "":
		b, err := os.ReadFile(v.file)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", v.file, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return v.literal, nil
}

// resolveAll resolves every value of m; what names the map in errors.
func resolveAll(m map[string]Value, what string, lookupEnv func(string) (string, bool)) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, err := v.resolve(lookupEnv)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// maxServerName keeps "mcp__<server>__" short enough to leave a tool at least
// 33 of the 64 characters a tool name may have.
const maxServerName = 24

// parseServers reads the configuration: the JSON of ORCHESTRATOR_MCP_SERVERS
// or, if that is empty, of the file ORCHESTRATOR_MCP_SERVERS_FILE. Errors
// name the variable, the tenant and the server. An empty configuration is
// no servers.
func parseServers(c Config) (map[string][]serverSpec, error) {
	varName, text := "ORCHESTRATOR_MCP_SERVERS", strings.TrimSpace(c.Servers)
	switch {
	case text != "" && c.ServersFile != "":
		return nil, errors.New("ORCHESTRATOR_MCP_SERVERS and ORCHESTRATOR_MCP_SERVERS_FILE are both set: set one")
	case c.ServersFile != "":
		varName = "ORCHESTRATOR_MCP_SERVERS_FILE"
		b, err := os.ReadFile(c.ServersFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", varName, err)
		}
		text = strings.TrimSpace(string(b))
	}
	if text == "" {
		return nil, nil
	}
	var byTenant map[string][]serverSpec
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&byTenant); err != nil {
		return nil, fmt.Errorf("%s: want {\"<tenant>\": [servers]}: %w", varName, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", varName)
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, tenant := range tenants {
		if err := grpcx.ValidScopeID(tenant); err != nil {
			return nil, fmt.Errorf("%s: tenant %q %w", varName, tenant, err)
		}
		seen := map[string]bool{}
		for i, s := range byTenant[tenant] {
			if err := s.validate(); err != nil {
				return nil, fmt.Errorf("%s: tenant %s, server %d (%q): %w", varName, tenant, i+1, s.Name, err)
			}
			if seen[s.Name] {
				return nil, fmt.Errorf("%s: tenant %s: two servers are named %q", varName, tenant, s.Name)
			}
			seen[s.Name] = true
		}
	}
	return byTenant, nil
}

// validate checks one server's configuration without resolving its secrets:
// a secret that is missing is that server's failure, reported when it is
// used, not a reason to stop the orchestrator.
func (s serverSpec) validate() error {
	if !validServerName(s.Name) {
		return fmt.Errorf("name must be 1-%d of a-z, 0-9, '-' and '_', without \"__\"", maxServerName)
	}
	switch {
	case (s.Command == "") == (s.URL == ""):
		return errors.New(`set exactly one of "command" (a stdio server) and "url" (a streamable HTTP server)`)
	case s.Command != "" && len(s.Headers) > 0:
		return errors.New(`"headers" are for a "url" server; a stdio server takes "env"`)
	case s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0 || s.Dir != ""):
		return errors.New(`"args", "env" and "dir" are for a "command" server`)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q is not an http(s) URL", s.URL)
		}
	}
	for name := range s.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("env name %q is not a variable name", name)
		}
	}
	for name := range s.Headers {
		if !validHeaderName(name) {
			return fmt.Errorf("header name %q is not an HTTP field name", name)
		}
	}
	return nil
}

func validServerName(s string) bool {
	if s == "" || len(s) > maxServerName || strings.Contains(s, "__") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validHeaderName reports whether s is an RFC 9110 field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
