package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// contextsFile is the CLI's config file, in the spirit of kubeconfig: named
// ways to reach a mesh, and the one in use.
type contextsFile struct {
	CurrentContext string         `json:"current-context,omitempty"`
	Contexts       []namedContext `json:"contexts"`
}

// namedContext is one mesh: its gateway, the key and the scope to use.
type namedContext struct {
	Name      string `json:"name"`
	URL       string `json:"url,omitempty"`
	APIKey    string `json:"api-key,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Project   string `json:"project,omitempty"`
	Transport string `json:"transport,omitempty"` // gateway (default) or grpc
}

func (f *contextsFile) find(name string) (*namedContext, bool) {
	for i := range f.Contexts {
		if f.Contexts[i].Name == name {
			return &f.Contexts[i], true
		}
	}
	return nil, false
}

// loadContexts reads path; a missing file is an empty one.
func loadContexts(path string) (*contextsFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &contextsFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("contexts file (AGENTMESH_CONFIG): %w", err)
	}
	var f contextsFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("contexts file %s (AGENTMESH_CONFIG): %w", path, err)
	}
	return &f, nil
}

// save writes f to path readable by its owner only (it holds API keys),
// through a temporary file so a crash leaves the old file whole. A path
// that is a symbolic link (contexts kept in a dotfiles repository) writes
// the file it points to, and stays a link.
func (f *contextsFile) save(path string) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("contexts file (AGENTMESH_CONFIG): %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("contexts file (AGENTMESH_CONFIG): %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (a *app) contextCmd() *cobra.Command {
	return group("context", "manage named contexts: which gateway, key and tenant to use",
		a.contextSetCmd(), a.contextUseCmd(), a.contextListCmd(), a.contextDeleteCmd())
}

func (a *app) contextSetCmd() *cobra.Command {
	var c namedContext
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "create or change a context (only the given settings change)",
		Example: `  agentmesh context set prod --url https://agentmesh.example.com --api-key "$KEY"
  agentmesh context set local --url http://localhost:8080 --tenant acme`,
		Args: exactArgs(1, "a context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := grpcx.ValidScopeID(args[0]); err != nil {
				return usagef("context name %v", err)
			}
			fl := cmd.Flags()
			if fl.Changed("url") {
				if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return usagef("--url %q: want http(s)://host[:port]", c.URL)
				}
			}
			if fl.Changed("transport") && c.Transport != "gateway" && c.Transport != "grpc" {
				return usagef("--transport %q: want gateway or grpc", c.Transport)
			}
			path := a.contextsPath()
			f, err := loadContexts(path)
			if err != nil {
				return err
			}
			cur, ok := f.find(args[0])
			if !ok {
				f.Contexts = append(f.Contexts, namedContext{Name: args[0]})
				cur = &f.Contexts[len(f.Contexts)-1]
			}
			for flag, dst := range map[string]*string{"url": &cur.URL, "api-key": &cur.APIKey, "tenant": &cur.Tenant, "project": &cur.Project, "transport": &cur.Transport} {
				if fl.Changed(flag) {
					*dst = map[string]string{"url": c.URL, "api-key": c.APIKey, "tenant": c.Tenant, "project": c.Project, "transport": c.Transport}[flag]
				}
			}
			if f.CurrentContext == "" {
				f.CurrentContext = args[0]
			}
			if err := f.save(path); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Err, "context %q saved in %s (current: %s)\n", args[0], path, f.CurrentContext)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&c.URL, "url", "", "gateway URL")
	fl.StringVar(&c.APIKey, "api-key", "", "gateway API key (stored in the file, mode 0600)")
	fl.StringVar(&c.Tenant, "tenant", "", "tenant, for a gateway without API keys")
	fl.StringVar(&c.Project, "project", "", "project")
	fl.StringVar(&c.Transport, "transport", "", "gateway (REST/SSE, the default) or grpc (the *_ADDR variables)")
	// The global flags of the same names choose how this call connects;
	// here they are the context's settings, so they are local.
	return cmd
}

func (a *app) contextUseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "use NAME",
		Short: "make a context the current one",
		Args:  exactArgs(1, "a context name"),
		RunE: func(_ *cobra.Command, args []string) error {
			err := a.editContext(args[0], func(f *contextsFile) { f.CurrentContext = args[0] })
			if err == nil {
				fmt.Fprintf(a.io.Err, "now using context %q\n", args[0])
			}
			return err
		},
	}
}

// editContext applies edit to the contexts file, which must hold name, and
// saves it.
func (a *app) editContext(name string, edit func(f *contextsFile)) error {
	path := a.contextsPath()
	f, err := loadContexts(path)
	if err != nil {
		return err
	}
	if _, ok := f.find(name); !ok {
		return status.Errorf(codes.NotFound, "context %q is not in %s (agentmesh context list)", name, path)
	}
	edit(f)
	return f.save(path)
}

func (a *app) contextDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "delete a context",
		Args:  exactArgs(1, "a context name"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.editContext(args[0], func(f *contextsFile) {
				f.Contexts = slices.DeleteFunc(f.Contexts, func(c namedContext) bool { return c.Name == args[0] })
				if f.CurrentContext == args[0] {
					f.CurrentContext = ""
				}
			})
		},
	}
}

// shownContext is a context as list prints it: the key masked.
type shownContext struct {
	Current   bool   `json:"current"`
	Name      string `json:"name"`
	URL       string `json:"url,omitempty"`
	APIKey    string `json:"api-key,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Project   string `json:"project,omitempty"`
	Transport string `json:"transport,omitempty"`
}

func (a *app) contextListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "list the contexts (API keys masked)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			f, err := loadContexts(a.contextsPath())
			if err != nil {
				return err
			}
			cur := first(a.context, a.cfg.Context, f.CurrentContext)
			list := []shownContext{}
			for _, c := range f.Contexts {
				s := shownContext{Current: c.Name == cur, Name: c.Name, URL: c.URL, Tenant: c.Tenant, Project: c.Project, Transport: c.Transport}
				if c.APIKey != "" {
					s.APIKey = "****"
				}
				list = append(list, s)
			}
			return a.emit(list, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "CURRENT\tNAME\tURL\tTRANSPORT\tTENANT\tPROJECT\tAPI KEY")
				for _, s := range list {
					mark := ""
					if s.Current {
						mark = "*"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, s.Name, s.URL, first(s.Transport, "gateway"), s.Tenant, s.Project, first(s.APIKey, "-"))
				}
			})
		},
	}
}
