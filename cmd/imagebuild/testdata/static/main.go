// Command static is a minimal Go program for the static-binary guard's
// test, built with CGO_ENABLED=0.
package main

import "fmt"

func main() { fmt.Println("static") }
