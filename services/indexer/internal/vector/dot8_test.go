package vector

import (
	"math/rand/v2"
	"testing"
)

func dot8Generic(a, b []int8) int32 {
	var s int32
	for i := range a {
		s += int32(a[i]) * int32(b[i])
	}
	return s
}

// TestDot8 checks the int8 inner product against plain Go, for lengths
// with and without a tail the assembly leaves to Go.
func TestDot8(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 15, 16, 32, 48, 383, 384, 400} {
		a, b := make([]int8, n), make([]int8, n)
		for i := range a {
			a[i], b[i] = int8(r.IntN(256)-128), int8(r.IntN(256)-128)
		}
		if g, w := dot8(a, b), dot8Generic(a, b); g != w {
			t.Fatalf("n=%d got %d want %d", n, g, w)
		}
	}
}

func TestQuantizeKeepsDistances(t *testing.T) {
	t.Parallel()
	vs := clustered(50, 384, 5, 1, 3)
	code := make([][]int8, len(vs))
	scale := make([]float32, len(vs))
	for i, v := range vs {
		Normalize(v)
		code[i] = make([]int8, len(v))
		scale[i] = quantize(v, code[i])
	}
	for i := 1; i < len(vs); i++ {
		exact := dot(vs[0], vs[i])
		approx := scale[0] * scale[i] * float32(dot8(code[0], code[i]))
		if d := exact - approx; d > 0.01 || d < -0.01 {
			t.Fatalf("pair %d: exact %.4f, quantised %.4f", i, exact, approx)
		}
	}
}
