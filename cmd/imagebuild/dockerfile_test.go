package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, ...
	args string
}

// stage is one FROM ... AS name block.
type stage struct {
	name, from string
	body       []instruction
}

// parseDockerfile splits a Dockerfile into its stages. It knows the subset
// of the syntax the repository's Dockerfile uses: comments, backslash
// continuations, one instruction per logical line.
func parseDockerfile(t *testing.T, text string) (map[string]stage, []string) {
	t.Helper()
	var logical []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	stages := map[string]stage{}
	var order []string
	var st *stage
	fromRE := regexp.MustCompile(`^FROM\s+(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)$`)
	for _, l := range logical {
		cmd, args, _ := strings.Cut(l, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			m := fromRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("Dockerfile: a FROM without AS name: %q", l)
			}
			if st != nil {
				stages[st.name] = *st
			}
			st = &stage{name: m[2], from: m[1]}
			order = append(order, st.name)
			continue
		}
		if st == nil {
			if cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", cmd)
			}
			continue
		}
		st.body = append(st.body, instruction{cmd: cmd, args: strings.TrimSpace(args)})
	}
	if st != nil {
		stages[st.name] = *st
	}
	return stages, order
}

// words splits s as a shell does for the simple quoting the Dockerfile
// uses: whitespace-separated words, double quotes grouping.
func words(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			inWord = true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// dockerConfig is what the Dockerfile says about a target's image, in the
// terms imagebuild writes, with the build args left as ${NAME}.
func dockerConfig(t *testing.T, stages map[string]stage, target string) (v1.Config, []string) {
	t.Helper()
	var chain []stage
	for n := target; ; {
		st, ok := stages[n]
		if !ok {
			break
		}
		chain = append([]stage{st}, chain...)
		n = st.from
	}
	// BuildKit and buildah give an image FROM scratch a default PATH.
	cfg := v1.Config{Env: []string{pathEnv}, ExposedPorts: map[string]struct{}{}, Labels: map[string]string{}}
	var copies []string
	for _, st := range chain {
		for _, in := range st.body {
			switch in.cmd {
			case "USER":
				cfg.User = in.args
			case "WORKDIR":
				cfg.WorkingDir = in.args
			case "EXPOSE":
				for _, p := range words(in.args) {
					cfg.ExposedPorts[p] = struct{}{}
				}
			case "LABEL":
				for _, kv := range words(in.args) {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						t.Fatalf("%s: LABEL %q is not key=value", st.name, kv)
					}
					cfg.Labels[k] = v
				}
			case "ENTRYPOINT":
				if err := json.Unmarshal([]byte(in.args), &cfg.Entrypoint); err != nil {
					t.Fatalf("%s: ENTRYPOINT is not the exec (JSON) form, which needs no shell: %v", st.name, err)
				}
			case "COPY":
				copies = append(copies, in.args)
			}
		}
	}
	return cfg, copies
}

func readDockerfile(t *testing.T) (map[string]stage, []string) {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return parseDockerfile(t, string(data))
}

// TestDockerfileBuildsTheSameImages holds the Dockerfile to what imagebuild
// builds: the same targets, each with the same user, working directory,
// entrypoint, ports and labels, the binary copied where the entrypoint
// points, built by the same `go build` from the same packages.
func TestDockerfileBuildsTheSameImages(t *testing.T) {
	t.Parallel()
	stages, order := readDockerfile(t)

	var targets []string
	for _, n := range order {
		if n != "build" && n != "base" {
			targets = append(targets, n)
		}
	}
	if diff := cmp.Diff(names(images), targets); diff != "" {
		t.Errorf("Dockerfile targets differ from imagebuild's images (-imagebuild +Dockerfile):\n%s", diff)
	}

	base, _ := dockerConfig(t, stages, "base")
	ca := base.Labels[labelCA]
	if ca == "" {
		t.Errorf("base stage has no %s label", labelCA)
	}
	meta := Meta{Version: "${VERSION}", Revision: "${REVISION}", Source: defaultSource, Licenses: defaultLicenses, CASource: ca}
	for _, im := range images {
		t.Run(im.Name, func(t *testing.T) {
			got, copies := dockerConfig(t, stages, im.Name)
			want := im.config(meta)
			// The Dockerfile cannot compute the creation time: it takes it as a build arg.
			want.Labels["org.opencontainers.image.created"] = "${CREATED}"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Dockerfile target %s differs from imagebuild's image (-imagebuild +Dockerfile):\n%s", im.Name, diff)
			}
			wantCopy := "--from=build /out/" + im.Name + " " + binDir + im.Name
			if !slices.Contains(copies, wantCopy) {
				t.Errorf("Dockerfile target %s does not COPY %s; its COPYs: %q", im.Name, wantCopy, copies)
			}
			// Its tools, collected by imagebuild in the build stage, as
			// `make images` collects them.
			wantTools := "--from=build /tools/" + im.Name + "/ /"
			if hasTools := len(im.Tools.Executables) > 0; slices.Contains(copies, wantTools) != hasTools {
				t.Errorf("Dockerfile target %s: COPY %s is there: %v, want %v; its COPYs: %q", im.Name, wantTools, !hasTools, hasTools, copies)
			}
			if st := stages[im.Name]; st.from != "base" {
				t.Errorf("Dockerfile target %s is FROM %s, want base", im.Name, st.from)
			}
		})
	}
	var withTools []string
	for _, im := range images {
		if len(im.Tools.Executables) > 0 {
			withTools = append(withTools, im.Name)
		}
	}
	wantRun := "go run ./cmd/imagebuild -arch $TARGETARCH -tools-out /tools " + strings.Join(withTools, " ")
	if !slices.ContainsFunc(stages["build"].body, func(in instruction) bool {
		return in.cmd == "RUN" && strings.HasSuffix(in.args, wantRun) && strings.Contains(in.args, "apt-get install -y --no-install-recommends poppler-utils")
	}) {
		t.Errorf("the build stage has no RUN installing poppler-utils and ending in %q", wantRun)
	}
	if stages["base"].from != "scratch" {
		t.Errorf("base stage is FROM %s, want scratch (an empty base, no shell)", stages["base"].from)
	}
}

// TestDockerfileGoBuildMatches checks the Dockerfile's `go build` against
// goBuildFlags and goBuildEnv, and its package list against the images.
func TestDockerfileGoBuildMatches(t *testing.T) {
	t.Parallel()
	stages, _ := readDockerfile(t)
	var build []string
	for _, in := range stages["build"].body {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = words(in.args)
		}
	}
	if build == nil {
		t.Fatal("the Dockerfile's build stage has no RUN ... go build")
	}
	// Skip RUN's --mount options; then environment assignments up to `go`.
	i := 0
	for i < len(build) && strings.HasPrefix(build[i], "--") {
		i++
	}
	var env []string
	for ; i < len(build) && build[i] != "go"; i++ {
		env = append(env, build[i])
	}
	if diff := cmp.Diff(goBuildEnv("$TARGETARCH"), env); diff != "" {
		t.Errorf("go build environment (-imagebuild +Dockerfile):\n%s", diff)
	}
	want := append([]string{"go", "build"}, goBuildFlags("${VERSION}")...)
	want = append(want, "-o", "/out/")
	want = append(want, packages(images)...)
	if diff := cmp.Diff(want, build[i:]); diff != "" {
		t.Errorf("go build command (-imagebuild +Dockerfile):\n%s", diff)
	}
}

// TestDockerfileBaseFilesMatch checks that the Dockerfile's base files come
// from where imagebuild takes them, with the same modes and owner.
func TestDockerfileBaseFilesMatch(t *testing.T) {
	t.Parallel()
	stages, _ := readDockerfile(t)
	var run string
	for _, in := range stages["build"].body {
		if in.cmd == "RUN" && strings.Contains(in.args, "/rootfs") {
			run = in.args
		}
	}
	entries, err := baseEntries([]byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	mode := map[string]int64{}
	for _, e := range entries {
		mode["/"+strings.TrimSuffix(e.name, "/")] = e.mode
	}
	for _, want := range []string{
		// debianCA's selection: the package's .crt files under
		// /usr/share/ca-certificates, in byte order, concatenated.
		"dpkg-query -L ca-certificates | grep -E '^/usr/share/ca-certificates/.+\\.crt$' | LC_ALL=C sort | xargs cat > /rootfs" + caFile,
		"cp cmd/imagebuild/rootfs/etc/passwd cmd/imagebuild/rootfs/etc/group /rootfs/etc/",
		fmt.Sprintf("chmod %o /rootfs/tmp", mode["/tmp"]),
		"mkdir -p /rootfs/etc/ssl/certs /rootfs/home /rootfs/tmp /home-nonroot",
	} {
		if !strings.Contains(run, want) {
			t.Errorf("the build stage's RUN lacks %q:\n%s", want, run)
		}
	}
	// COPY creates nonroot's home 0755; imagebuild must agree.
	if mode[home] != 0o755 || mode["/home"] != 0o755 {
		t.Errorf("imagebuild makes /home %o and %s %o; COPY makes both 755", mode["/home"], home, mode[home])
	}
	_, copies := dockerConfig(t, stages, "base")
	wantCopies := []string{"--from=build /rootfs/ /", "--from=build --chown=" + user() + " /home-nonroot " + home}
	if diff := cmp.Diff(wantCopies, copies); diff != "" {
		t.Errorf("base stage COPYs (-want +Dockerfile):\n%s", diff)
	}
}

// TestKustomizeNamesTheBuiltImages checks that deploy/k8s names exactly the
// images imagebuild builds, so `kustomize edit set image` has something to
// point at for each.
func TestKustomizeNamesTheBuiltImages(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/k8s/base/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s*-\s*\{?\s*name:\s*`+regexp.QuoteMeta(repository)+`([a-z0-9-]+)`).FindAllStringSubmatch(string(data), -1) {
		got = append(got, m[1])
	}
	want := names(images)
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agentmesh/* images in deploy/k8s/base/kustomization.yaml (-imagebuild +kustomization):\n%s", diff)
	}
}
