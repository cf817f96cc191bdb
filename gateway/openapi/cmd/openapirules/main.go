// Command openapirules adds the protos' request constraints to the
// generated OpenAPI document in place, then the hand-written fragments
// named after it (routes without an RPC, gateway/openapi/fragments; see
// package openapirules); `make generate` runs it after buf generate.
package main

import (
	"fmt"
	"os"

	"github.com/agentmesh/agentmesh/gateway/openapi/openapirules"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: openapirules <swagger.json> [fragment.json ...]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(path string, fragmentPaths []string) error {
	spec, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	files, err := openapirules.ServiceFiles()
	if err != nil {
		return err
	}
	out, err := openapirules.Apply(spec, files)
	if err != nil {
		return err
	}
	var fragments [][]byte
	for _, p := range fragmentPaths {
		f, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fragments = append(fragments, f)
	}
	if out, err = openapirules.Merge(out, fragments...); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
