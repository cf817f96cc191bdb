package up

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/services/classifier/classifier"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
	"github.com/agentmesh/agentmesh/services/sqlagent/sqlagent"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// Component is a named configuration struct of the mesh.
type Component struct {
	// Name is the service (or "agentmesh up").
	Name string
	// Config is a pointer to the service's zero Config.
	Config any
}

// Components lists every process's configuration struct.
func Components() []Component {
	return []Component{
		{"agentmesh up", &Config{}},
		{"agentmesh CLI", &cli.Config{}},
		{"gateway", &httpgateway.Config{}},
		{"modelgateway", &modelgateway.Config{}},
		{"orchestrator", &orchestrator.Config{}},
		{"vision", &vision.Config{}},
		{"indexer", &indexer.Config{}},
		{"classifier", &classifier.Config{}},
		{"sqlagent", &sqlagent.Config{}},
	}
}

// PrintVarsTable writes the Markdown table of every environment variable,
// one row per variable with the services that read it.
func PrintVarsTable(w io.Writer) {
	type row struct {
		v      config.Var
		used   []string
		others []string // readers whose default differs from v's, with theirs
	}
	rows := map[string]*row{}
	for _, c := range Components() {
		for _, v := range config.Vars("", c.Config) {
			r, ok := rows[v.Name]
			if !ok {
				r = &row{v: v}
				rows[v.Name] = r
			}
			r.used = append(r.used, c.Name)
			if v.Default != r.v.Default || v.Required != r.v.Required {
				r.others = append(r.others, c.Name+": "+shownDefault(v))
			}
		}
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "| variable | default | read by | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, n := range names {
		r := rows[n]
		def := shownDefault(r.v)
		if len(r.others) > 0 {
			def += " (" + strings.Join(r.others, "; ") + ")"
		}
		used := strings.Join(r.used, ", ")
		if len(r.used) >= 6 {
			used = "all services"
		}
		help := r.v.Help
		if r.v.Secret {
			help += " (secret: never logged)"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", n, def, used, strings.ReplaceAll(help, "|", "\\|"))
	}
}

// shownDefault is a variable's default as the table shows it.
func shownDefault(v config.Var) string {
	switch {
	case v.Required:
		return "**required**"
	case v.Default == "":
		return "none"
	}
	return "`" + v.Default + "`"
}
