package analysis

import (
	"fmt"
	"strings"
)

// stage1System frames stage 1: a factual description that later steps
// (content type detection, extraction, indexing) read instead of the image.
const stage1System = `You describe images attached to documents for a document intake pipeline.
Say what kind of image it is (screenshot of an application, photo, diagram, chart, scanned page),
what it shows, and the visible text that matters: titles, identifiers, names, statuses, error messages.
Be factual and concise. Do not guess what is not visible. Answer in plain text.`

// stage1Prompt asks for the general description of one image.
func stage1Prompt(name, contextText string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Attachment: %s\n", name)
	if contextText != "" {
		b.WriteString("\nDocument text around the image:\n" + contextText + "\n")
	}
	b.WriteString("\nWhat is in this image?")
	return b.String()
}

// stage2System frames stage 2 for one content type.
func stage2System(k *kind) string {
	return fmt.Sprintf(`You read images attached to a %s and extract the details a reader of a %s needs.
Report only what is visible in the image; use an empty string or an empty list for anything that is not visible.
Answer with one JSON object that matches the given schema, and nothing else.`, k.Title, k.Title)
}

// stage2Prompt asks for the type-specific details of one image. summary is
// the image's own stage 1 description (ownSummary) or a summary over all
// attachments from an earlier call.
func stage2Prompt(k *kind, name, summary string, ownSummary bool, contextText string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Attachment: %s\n", name)
	if summary != "" {
		if ownSummary {
			b.WriteString("\nGeneral description of this image:\n")
		} else {
			b.WriteString("\nGeneral description of the document's images, from an earlier analysis:\n")
		}
		b.WriteString(summary + "\n")
	}
	if contextText != "" {
		b.WriteString("\nDocument text around the image:\n" + contextText + "\n")
	}
	b.WriteString("\n" + k.Focus)
	return b.String()
}
