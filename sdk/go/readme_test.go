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

// TestReadmeShowsTheExamples: sdk/README.md's hello worlds are the code
// that compiles (Example here, examples/hello.ts under tsc).
func TestReadmeShowsTheExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{
		"```go\n" + hello(t, "example_test.go", 1) + "\n```",
		"```ts\n" + hello(t, "../typescript/examples/hello.ts", 0) + "\n```",
	} {
		if !strings.Contains(string(readme), code) {
			t.Errorf("sdk/README.md does not show, as is:\n%s", code)
		}
	}
}
