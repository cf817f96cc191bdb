package analysis

import (
	"encoding/json"
	"fmt"
	"strings"
)

// kind is what stage 2 extracts for one content type: the fields of its JSON
// answer, how to ask for them, and how to render them.
type kind struct {
	// Title names the content type in prompts and renderings ("e-mail").
	Title string
	// SchemaName names the JSON schema for the gateway.
	SchemaName string
	// Focus tells the model what to look for.
	Focus string
	// Fields are the extracted fields, in rendering order.
	Fields []field

	schema string // JSON schema text, built from Fields
}

// field is one extracted field.
type field struct {
	// Name is the JSON property name.
	Name string
	// Label is the rendered label.
	Label string
	// List is true for an array of strings, false for one string.
	List bool
	// Description tells the model what belongs in the field.
	Description string
}

// details are extracted values, one slice per field of the kind, in the same
// order; an empty slice means the field was not visible.
type details struct {
	// Values holds each field's values.
	Values [][]string
}

// kinds maps each content type with a stage 2 to what it extracts.
var kinds = map[ContentType]*kind{
	Email: newKind("e-mail", "email_image_details",
		"Extract the e-mail addresses, the sender's name and the recipients' names visible in the image, and the subject line if it is shown.",
		field{"sender", "Sender", false, "the sender's name as shown, empty if not visible"},
		field{"recipients", "Recipients", true, "names of the recipients (To, Cc) as shown"},
		field{"email_addresses", "E-mail addresses", true, "every e-mail address visible, verbatim"},
		field{"subject", "Subject", false, "the subject line, empty if not visible"},
	),
	Ticket: newKind("ticket", "ticket_image_details",
		"Extract the ticket key (for example SDB-2080), its status, its assignee and its title as shown in the image.",
		field{"key", "Ticket key", false, "the issue key, e.g. SDB-2080, empty if not visible"},
		field{"status", "Status", false, "the workflow status, e.g. In Progress, empty if not visible"},
		field{"assignee", "Assignee", false, "the assignee's name, empty if not visible"},
		field{"title", "Title", false, "the ticket's summary line, empty if not visible"},
	),
	Wiki: newKind("wiki page", "wiki_image_details",
		"Extract the page title, the author and the visible headings, in order, as shown in the image.",
		field{"page_title", "Page title", false, "the page title, empty if not visible"},
		field{"author", "Author", false, "the author or last editor, empty if not visible"},
		field{"headings", "Headings", true, "the visible section headings, in order"},
	),
	Log: newKind("log", "log_image_details",
		"Extract the error codes, the timestamps and the stack trace snippets visible in the image, verbatim.",
		field{"error_codes", "Error codes", true, "error codes or exception types, verbatim"},
		field{"timestamps", "Timestamps", true, "timestamps, verbatim"},
		field{"stack_trace_snippets", "Stack trace snippets", true, "stack trace lines or short blocks, verbatim"},
	),
}

// newKind builds a kind and its JSON schema: an object with every field
// required and nothing else, so "not visible" is an explicit empty value.
func newKind(title, schemaName, focus string, fields ...field) *kind {
	props := map[string]any{}
	required := make([]string, 0, len(fields))
	for _, f := range fields {
		if f.List {
			props[f.Name] = map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": f.Description}
		} else {
			props[f.Name] = map[string]any{"type": "string", "description": f.Description}
		}
		required = append(required, f.Name)
	}
	b, err := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // static input: cannot fail
	}
	return &kind{Title: title, SchemaName: schemaName, Focus: focus, Fields: fields, schema: string(b)}
}

// parse reads the model's JSON answer. It is lenient where the schema
// already held at the gateway: a list given as one string, or a string given
// as a list, is taken as it is meant.
func (k *kind) parse(content string) (details, error) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(content)), &obj); err != nil {
		return details{}, fmt.Errorf("answer is not a JSON object: %w", err)
	}
	d := details{Values: make([][]string, len(k.Fields))}
	for i, f := range k.Fields {
		var vals []string
		switch v := obj[f.Name].(type) {
		case string:
			vals = []string{v}
		case []any:
			for _, item := range v {
				if s, ok := item.(string); ok {
					vals = append(vals, s)
				}
			}
		}
		d.Values[i] = appendDistinct(nil, vals...)
	}
	return d, nil
}

// merge combines the details of several images: per field, every distinct
// value in order of first appearance.
func merge(ds []details) details {
	var out details
	for _, d := range ds {
		for i, vals := range d.Values {
			for len(out.Values) <= i {
				out.Values = append(out.Values, nil)
			}
			out.Values[i] = appendDistinct(out.Values[i], vals...)
		}
	}
	return out
}

// render writes details as text: "Label: value" for one value, a bulleted
// block for several or for list fields, and a sentence when nothing was
// visible.
func (k *kind) render(d details) string {
	var b strings.Builder
	for i, f := range k.Fields {
		if i >= len(d.Values) || len(d.Values[i]) == 0 {
			continue
		}
		vals := d.Values[i]
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		if !f.List && len(vals) == 1 {
			fmt.Fprintf(&b, "%s: %s", f.Label, vals[0])
			continue
		}
		b.WriteString(f.Label + ":")
		for _, v := range vals {
			b.WriteString("\n- " + strings.ReplaceAll(v, "\n", "\n  "))
		}
	}
	if b.Len() == 0 {
		return fmt.Sprintf("No %s details visible.", k.Title)
	}
	return b.String()
}

// appendDistinct appends the trimmed, non-empty vals not yet in dst.
func appendDistinct(dst []string, vals ...string) []string {
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		dup := false
		for _, have := range dst {
			if have == v {
				dup = true
				break
			}
		}
		if !dup {
			dst = append(dst, v)
		}
	}
	return dst
}
