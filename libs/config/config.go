// Package config loads a service's typed configuration from environment
// variables.
//
// A configuration is a struct whose fields carry tags:
//
//	type Config struct {
//		GRPCAddr string        `env:"GRPC_ADDR" default:":9090" help:"gRPC listen address"`
//		MongoURI string        `env:"MONGO_URI" required:"true" secret:"true" help:"MongoDB connection string"`
//		Timeout  time.Duration `env:"TIMEOUT" default:"30s"`
//	}
//
// Load fills it from the environment (through a lookup function, so tests and
// `agentmesh up` pass their own), applies defaults, and reports every missing
// required variable and every unparsable value by name in one error. A
// variable set to the empty string counts as unset (the default applies),
// unless its field is tagged `allowempty:"true"`: then empty is a value of
// its own, the field's zero value (METRICS_ADDR="" turns the metrics
// endpoint off). A field tagged `oneof:"a,b,c"` takes only those values
// (compared case-insensitively, stored as listed), so a misspelt level or
// format stops the start instead of quietly meaning the default; a numeric
// field tagged `min:"0"` or `max:"1"` must lie within them. Nested
// structs are walked; a nested struct's `env` tag is a prefix for its fields.
// Secrets are masked by Redacted, so the effective configuration can be
// logged safely. Only main (and `agentmesh up`) call Load: no other package
// reads the environment.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Lookup returns the value of an environment variable and whether it is set.
type Lookup func(name string) (string, bool)

// Env is the process environment as a Lookup.
func Env() Lookup { return os.LookupEnv }

// Map is a Lookup over a fixed map, for tests and in-process services.
func Map(m map[string]string) Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// Overlay returns a Lookup that consults each lookup in turn; the first that
// has the variable wins.
func Overlay(lookups ...Lookup) Lookup {
	return func(name string) (string, bool) {
		for _, l := range lookups {
			if v, ok := l(name); ok {
				return v, true
			}
		}
		return "", false
	}
}

// Var describes one configuration variable.
type Var struct {
	// Name is the full environment variable name, prefix included.
	Name string
	// Default is the default value, empty if none.
	Default string
	// Required is true when the variable must be set.
	Required bool
	// Secret is true when the value must never be logged.
	Secret bool
	// Help says what the variable does.
	Help string
}

// Error lists every variable that could not be loaded.
type Error struct {
	// Missing holds required variables that are not set.
	Missing []string
	// Invalid holds "NAME: reason" for values that could not be parsed.
	Invalid []string
}

func (e *Error) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, "missing required environment variable(s): "+strings.Join(e.Missing, ", "))
	}
	if len(e.Invalid) > 0 {
		parts = append(parts, "invalid value(s): "+strings.Join(e.Invalid, "; "))
	}
	return "config: " + strings.Join(parts, "; ")
}

// Load fills dst, a pointer to a struct, from lookup. Variable names are
// prefix + the field's env tag. It returns an *Error naming every missing
// required variable and every invalid value.
func Load(prefix string, dst any, lookup Lookup) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return errors.New("config: Load needs a pointer to a struct")
	}
	cerr := &Error{}
	load(prefix, v.Elem(), lookup, cerr)
	if len(cerr.Missing) > 0 || len(cerr.Invalid) > 0 {
		return cerr
	}
	return nil
}

func load(prefix string, v reflect.Value, lookup Lookup, cerr *Error) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) {
			load(prefix+name, fv, lookup, cerr)
			continue
		}
		full := prefix + name
		raw, set := lookup(full)
		if set && raw == "" && f.Tag.Get("allowempty") == "true" {
			fv.SetZero()
			continue
		}
		if !set || raw == "" {
			if f.Tag.Get("required") == "true" {
				cerr.Missing = append(cerr.Missing, full)
				continue
			}
			def, hasDef := f.Tag.Lookup("default")
			if !hasDef {
				continue
			}
			raw = def
		}
		if oneof, ok := f.Tag.Lookup("oneof"); ok {
			canon, err := choose(raw, oneof)
			if err != nil {
				cerr.Invalid = append(cerr.Invalid, fmt.Sprintf("%s=%q: %v", full, shown(f, raw), err))
				continue
			}
			raw = canon
		}
		err := setValue(fv, raw)
		if err == nil {
			err = inRange(f, fv)
		}
		if err != nil {
			cerr.Invalid = append(cerr.Invalid, fmt.Sprintf("%s=%q: %v", full, shown(f, raw), err))
		}
	}
}

// inRange checks a numeric field against its min and max tags.
func inRange(f reflect.StructField, fv reflect.Value) error {
	var v float64
	switch fv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v = float64(fv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v = float64(fv.Uint())
	case reflect.Float32, reflect.Float64:
		v = fv.Float()
	default:
		return nil
	}
	if lo, ok := f.Tag.Lookup("min"); ok {
		if n, err := strconv.ParseFloat(lo, 64); err == nil && v < n {
			return fmt.Errorf("must be at least %s", lo)
		}
	}
	if hi, ok := f.Tag.Lookup("max"); ok {
		if n, err := strconv.ParseFloat(hi, 64); err == nil && v > n {
			return fmt.Errorf("must be at most %s", hi)
		}
	}
	return nil
}

// shown is a raw value as an error may print it: masked for secrets.
func shown(f reflect.StructField, raw string) string {
	if f.Tag.Get("secret") == "true" {
		return "***"
	}
	return raw
}

// choose returns the listed value of a oneof tag that raw names, ignoring
// case, or an error listing the allowed values.
func choose(raw, oneof string) (string, error) {
	allowed := strings.Split(oneof, ",")
	for _, a := range allowed {
		if strings.EqualFold(strings.TrimSpace(raw), a) {
			return a, nil
		}
	}
	return "", fmt.Errorf("must be one of %s", strings.Join(allowed, ", "))
}

func setValue(fv reflect.Value, raw string) error {
	if fv.Type() == reflect.TypeOf(time.Duration(0)) {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(d))
		return nil
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return err
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, fv.Type().Bits())
		if err != nil {
			return err
		}
		fv.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(raw, 10, fv.Type().Bits())
		if err != nil {
			return err
		}
		fv.SetUint(n)
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(raw, fv.Type().Bits())
		if err != nil {
			return err
		}
		fv.SetFloat(n)
	case reflect.Slice:
		if fv.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("unsupported slice type %s", fv.Type())
		}
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		fv.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported field type %s", fv.Type())
	}
	return nil
}

// Vars lists the variables a configuration struct reads, sorted by name.
// A nil or non-struct argument yields nothing.
func Vars(prefix string, cfg any) []Var {
	t := reflect.TypeOf(cfg)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []Var
	vars(prefix, t, &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func vars(prefix string, t reflect.Type, out *[]Var) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, ok := f.Tag.Lookup("env")
		if !ok || !f.IsExported() {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) {
			vars(prefix+name, f.Type, out)
			continue
		}
		*out = append(*out, Var{
			Name:     prefix + name,
			Default:  f.Tag.Get("default"),
			Required: f.Tag.Get("required") == "true",
			Secret:   f.Tag.Get("secret") == "true",
			Help:     f.Tag.Get("help"),
		})
	}
}

// Redacted returns the effective configuration as name → value with every
// secret masked, for logging at start-up.
func Redacted(prefix string, cfg any) map[string]string {
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	out := map[string]string{}
	if v.Kind() == reflect.Struct {
		redact(prefix, v, out)
	}
	return out
}

func redact(prefix string, v reflect.Value, out map[string]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, ok := f.Tag.Lookup("env")
		if !ok || !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Time{}) {
			redact(prefix+name, fv, out)
			continue
		}
		val := fmt.Sprint(fv.Interface())
		if fv.Kind() == reflect.Slice {
			val = strings.Trim(val, "[]")
		}
		if f.Tag.Get("secret") == "true" && val != "" {
			val = "***"
		}
		out[prefix+name] = val
	}
}
