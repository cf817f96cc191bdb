package vector

import (
	"math/rand/v2"
)

// clustered returns n vectors of dim dimensions drawn around nc random
// centres, the shape real embeddings have (topics), from a fixed seed.
func clustered(n, dim, nc int, spread float32, seed uint64) [][]float32 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	centres := make([][]float32, nc)
	for i := range centres {
		c := make([]float32, dim)
		for j := range c {
			c[j] = float32(r.NormFloat64())
		}
		Normalize(c)
		centres[i] = c
	}
	out := make([][]float32, n)
	for i := range out {
		c := centres[r.IntN(nc)]
		v := make([]float32, dim)
		for j := range v {
			v[j] = c[j] + spread*float32(r.NormFloat64())/20
		}
		out[i] = v
	}
	return out
}
