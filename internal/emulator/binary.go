// Package emulator runs the official Cloud Spanner emulator for tests and
// demos, so that code using Spanner can be exercised without a Google Cloud
// project, credentials or network.
package emulator

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const binaryName = "emulator_main"

// Binary locates emulator_main so callers need no configuration on a machine
// with the gcloud SDK (or the google-cloud-cli-spanner-emulator package)
// installed, while SPANNER_EMULATOR_BIN still lets anyone pin an exact build.
// It looks at $SPANNER_EMULATOR_BIN (which must then exist), the gcloud SDK,
// and finally $PATH.
func Binary() (string, error) {
	if p := os.Getenv("SPANNER_EMULATOR_BIN"); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("SPANNER_EMULATOR_BIN=%s: %w; point it at an emulator_main binary, "+
				"such as the one the package google-cloud-cli-spanner-emulator installs; unset it to search the gcloud SDK and $PATH, "+
				"or set SPANNER_EMULATOR_HOST to a running emulator", p, err)
		}
		return p, nil
	}

	var looked []string
	for _, root := range sdkRoots() {
		p := filepath.Join(root, "bin", "cloud_spanner_emulator", binaryName)
		looked = append(looked, p)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(binaryName); err == nil {
		return p, nil
	}
	looked = append(looked, binaryName+" on $PATH")
	return "", fmt.Errorf("cloud Spanner emulator not found (looked at %s); "+
		"install it (apt-get install google-cloud-cli-spanner-emulator, or gcloud components install cloud-spanner-emulator), "+
		"or set SPANNER_EMULATOR_BIN to an emulator_main binary, "+
		"or set SPANNER_EMULATOR_HOST to a running emulator (host:port)",
		strings.Join(looked, ", "))
}

// sdkRoots lists candidate gcloud SDK roots without running gcloud, which
// takes seconds to start.
func sdkRoots() []string {
	var roots []string
	if r := os.Getenv("CLOUDSDK_ROOT_DIR"); r != "" {
		roots = append(roots, r)
	}
	// A gcloud on PATH is usually a symlink to <root>/bin/gcloud.
	if g, err := exec.LookPath("gcloud"); err == nil {
		if resolved, err := filepath.EvalSymlinks(g); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(resolved)))
		}
	}
	roots = append(roots, "/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/google-cloud-sdk")
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, "google-cloud-sdk"))
	}

	seen := make(map[string]bool)
	unique := roots[:0]
	for _, r := range roots {
		r = filepath.Clean(r)
		if !seen[r] {
			seen[r] = true
			unique = append(unique, r)
		}
	}
	return unique
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return errors.New("is not executable")
	}
	return nil
}
