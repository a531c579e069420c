package svcsdk_test

import (
	"os"
	"strings"
	"testing"
)

// hello is the code between the hello:start and hello:end lines of file,
// with dedent leading tabs removed from each line.
func hello(t *testing.T, file string, dedent int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "hello:start\n")
	if !ok {
		t.Fatalf("%s has no hello:start line", file)
	}
	i := strings.Index(rest, "hello:end")
	if i < 0 {
		t.Fatalf("%s has no hello:end line", file)
	}
	lines := strings.Split(rest[:strings.LastIndex(rest[:i], "\n")], "\n")
	for j, l := range lines {
		for range dedent {
			l = strings.TrimPrefix(l, "\t")
		}
		lines[j] = l
	}
	return strings.Join(lines, "\n")
}

// TestReadmeShowsTheExamples: the hello worlds of sdk/README.md and of the
// top-level README.md (For integrators) are the code that compiles (Example
// here, examples/hello.ts under tsc).
func TestReadmeShowsTheExamples(t *testing.T) {
	code := []string{
		"```go\n" + hello(t, "example_test.go", 1) + "\n```",
		"```ts\n" + hello(t, "../typescript/examples/hello.ts", 0) + "\n```",
	}
	for _, file := range []string{"../README.md", "../../README.md"} {
		readme, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range code {
			if !strings.Contains(string(readme), c) {
				t.Errorf("%s does not show, as is:\n%s", file, c)
			}
		}
	}
}
