// Command docgen writes the generated pages of docs/ from the code they
// describe: docs/configuration.md from the settings each service declares
// (service.Config.Declare), so the page cannot drift from --help. Its tests
// fail when the committed page is stale and when a spec reference in a Go
// comment names no heading of docs/spec.
//
// Run it from anywhere inside the checkout:
//
//	go run ./cmd/docgen
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// configurationPage is the generated page, relative to the repository root.
const configurationPage = "docs/configuration.md"

// regenerate is the command that rewrites the generated pages; failure
// messages quote it.
const regenerate = "go run ./cmd/docgen"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %s\n", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	page, err := renderConfiguration()
	if err != nil {
		return fmt.Errorf("error rendering %s: %w", configurationPage, err)
	}
	path := filepath.Join(root, configurationPage)
	if err := os.WriteFile(path, page, 0o644); err != nil {
		return fmt.Errorf("error writing %s: %w", configurationPage, err)
	}
	fmt.Printf("wrote %s\n", path)
	return nil
}

// repoRoot returns the directory holding go.work, searched upwards from the
// working directory (go run and go test both start inside the checkout).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("error reading the working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory: run docgen inside the chatd checkout")
		}
		dir = parent
	}
}
