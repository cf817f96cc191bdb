package testkit

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

// PNG returns a small, real 4×4 PNG whose pixels depend on seed, so images
// made with different seeds differ on the wire.
func PNG(t testing.TB, seed uint8) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for x := range 4 {
		for y := range 4 {
			img.Set(x, y, color.RGBA{R: seed, G: uint8(x * 40), B: uint8(y * 40), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
