package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"golang.org/x/oauth2"
	"google.golang.org/api/impersonate"
	"google.golang.org/api/option"
)

// cloudPlatformScope is what an impersonated token is minted for; the
// Spanner clients narrow nothing further.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// credentialSettings are the resolved credentials for real Spanner. Zero
// values mean Application Default Credentials.
type credentialSettings struct {
	accessToken string
	// credentialsJSON is the content of credentials, read from its file
	// when it named one.
	credentialsJSON []byte
	impersonate     string
}

// resolveCredentials applies the google provider's precedence: settings in
// the configuration beat the environment, and an access token beats a key.
func resolveCredentials(cfg providerModel) (credentialSettings, diag.Diagnostics) {
	var diags diag.Diagnostics
	var s credentialSettings
	s.impersonate, _ = valueOrEnv(cfg.ImpersonateServiceAccount, "GOOGLE_IMPERSONATE_SERVICE_ACCOUNT")

	token, creds := cfg.AccessToken.ValueString(), cfg.Credentials.ValueString()
	var credsFromEnv bool
	if token == "" && creds == "" {
		token = os.Getenv("GOOGLE_OAUTH_ACCESS_TOKEN")
		creds = os.Getenv("GOOGLE_CREDENTIALS")
		credsFromEnv = true
	}
	switch {
	case token != "":
		s.accessToken = token
	case creds != "":
		b, err := credentialsJSON(creds)
		if err != nil {
			detail := err.Error()
			if credsFromEnv {
				detail += " (the value comes from the GOOGLE_CREDENTIALS environment variable)"
			}
			diags.AddAttributeError(path.Root("credentials"), "Invalid credentials", detail)
			return s, diags
		}
		s.credentialsJSON = b
	}
	return s, diags
}

// credentialsJSON accepts what the google provider accepts: the JSON itself
// or the path of a file holding it. Error messages never quote the value,
// which may be a secret.
func credentialsJSON(v string) ([]byte, error) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		return checkCredentialJSON([]byte(v), "credentials")
	}
	p := v
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(home, rest)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("credentials must be a JSON credential configuration or the path of a file holding one; "+
			"it does not start with '{' and reading it as a file failed: %v", err)
	}
	return checkCredentialJSON(b, "the credentials file")
}

// checkCredentialJSON checks that b is a credential configuration before it reaches the
// auth library, which Google asks of credentials from outside the program.
func checkCredentialJSON(b []byte, what string) ([]byte, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	if head.Type == "" {
		return nil, fmt.Errorf(`%s has no "type"; expected a credential configuration such as a service account key (type "service_account")`, what)
	}
	return b, nil
}

// key identifies the settings in the connection cache without keeping the
// secrets themselves as map keys.
func (s credentialSettings) key() string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(s.accessToken), s.credentialsJSON, []byte(s.impersonate)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return "google\x00" + hex.EncodeToString(h.Sum(nil))
}

// clientOptions turns the settings into client options. Only impersonation
// does work here (it builds a token source on the base credentials); ADC is
// looked up by the clients when they are first created.
func (s credentialSettings) clientOptions(ctx context.Context) ([]option.ClientOption, diag.Diagnostics) {
	var diags diag.Diagnostics
	var base []option.ClientOption
	switch {
	case s.accessToken != "":
		base = []option.ClientOption{option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: s.accessToken}))}
	case s.credentialsJSON != nil:
		base = []option.ClientOption{option.WithCredentialsJSON(s.credentialsJSON)}
	}
	if s.impersonate == "" {
		return base, diags
	}
	// The token source refreshes for as long as the cached clients live, so
	// it must not be bound to this request.
	ts, err := impersonate.CredentialsTokenSource(context.WithoutCancel(ctx), impersonate.CredentialsConfig{
		TargetPrincipal: s.impersonate,
		Scopes:          []string{cloudPlatformScope},
	}, base...)
	if err != nil {
		diags.AddAttributeError(path.Root("impersonate_service_account"), "Cannot impersonate service account",
			fmt.Sprintf("impersonating %s: %v", s.impersonate, err))
		return nil, diags
	}
	return []option.ClientOption{option.WithTokenSource(ts)}, diags
}
