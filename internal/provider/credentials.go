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

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/credentials/impersonate"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"google.golang.org/api/option"
)

// cloudPlatformScope is what tokens are minted for; the Spanner clients
// narrow nothing further.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// credentialSettings are the resolved credentials for real Spanner. Zero
// values mean Application Default Credentials.
type credentialSettings struct {
	accessToken string
	// credentialsJSON is the content of credentials, read from its file
	// when it named one.
	credentialsJSON []byte
	// credentialsFromEnv says the token or key came from the environment.
	credentialsFromEnv bool
	impersonate        string
	delegates          []string
}

// resolveCredentials applies the google provider's precedence: settings in
// the configuration beat the environment, and an access token beats a key.
func resolveCredentials(ctx context.Context, cfg providerModel) (credentialSettings, diag.Diagnostics) {
	var diags diag.Diagnostics
	var s credentialSettings
	s.impersonate, _ = valueOrEnv(cfg.ImpersonateServiceAccount, "GOOGLE_IMPERSONATE_SERVICE_ACCOUNT")
	if !cfg.ImpersonateServiceAccountDelegates.IsNull() {
		diags.Append(cfg.ImpersonateServiceAccountDelegates.ElementsAs(ctx, &s.delegates, false)...)
	}
	if len(s.delegates) > 0 && s.impersonate == "" {
		diags.AddAttributeError(path.Root("impersonate_service_account_delegates"), "Delegates without impersonation",
			"Delegates lead to the service account to impersonate: set impersonate_service_account (or the "+
				"GOOGLE_IMPERSONATE_SERVICE_ACCOUNT environment variable) too, or remove the delegates.")
	}

	token, creds := cfg.AccessToken.ValueString(), cfg.Credentials.ValueString()
	if token == "" && creds == "" {
		token = os.Getenv("GOOGLE_OAUTH_ACCESS_TOKEN")
		creds = os.Getenv("GOOGLE_CREDENTIALS")
		s.credentialsFromEnv = true
	}
	switch {
	case token != "":
		s.accessToken = token
	case creds != "":
		b, err := credentialsJSON(creds)
		if err != nil {
			detail := err.Error()
			if s.credentialsFromEnv {
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
	for _, part := range [][]byte{[]byte(s.accessToken), s.credentialsJSON, []byte(s.impersonate), []byte(strings.Join(s.delegates, ","))} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return "google\x00" + hex.EncodeToString(h.Sum(nil))
}

// clientOptions finds the credentials once, in Configure, so that a missing
// or broken credential fails the first command that needs Spanner with a
// message saying what was tried, rather than the first read much later.
// Finding them reads files and may ask the metadata server; it mints no
// token.
func (s credentialSettings) clientOptions(context.Context) ([]option.ClientOption, diag.Diagnostics) {
	var diags diag.Diagnostics
	var base *auth.Credentials
	switch {
	case s.accessToken != "":
		base = auth.NewCredentials(&auth.CredentialsOptions{TokenProvider: staticToken(s.accessToken)})
	case s.credentialsJSON != nil:
		var err error
		if base, err = credentials.DetectDefault(&credentials.DetectOptions{
			Scopes: []string{cloudPlatformScope}, CredentialsJSON: s.credentialsJSON,
		}); err != nil {
			detail := fmt.Sprintf("The credential configuration cannot be used: %v", err)
			if s.credentialsFromEnv {
				detail += " (it comes from the GOOGLE_CREDENTIALS environment variable)"
			}
			diags.AddAttributeError(path.Root("credentials"), "Invalid credentials", detail)
			return nil, diags
		}
	default:
		var err error
		if base, err = credentials.DetectDefault(&credentials.DetectOptions{Scopes: []string{cloudPlatformScope}}); err != nil {
			diags.AddError("No Google Cloud credentials", noCredentials(err))
			return nil, diags
		}
	}
	if s.impersonate == "" {
		return []option.ClientOption{option.WithAuthCredentials(base)}, diags
	}
	// The token provider refreshes for as long as the cached clients live.
	creds, err := impersonate.NewCredentials(&impersonate.CredentialsOptions{
		TargetPrincipal: s.impersonate,
		Scopes:          []string{cloudPlatformScope},
		Delegates:       s.delegates,
		Credentials:     base,
	})
	if err != nil {
		diags.AddAttributeError(path.Root("impersonate_service_account"), "Cannot impersonate service account",
			fmt.Sprintf("impersonating %s: %v", s.impersonate, err))
		return nil, diags
	}
	return []option.ClientOption{option.WithAuthCredentials(creds)}, diags
}

// noCredentials says where the provider looked, in the order it looked.
func noCredentials(err error) string {
	adc := "GOOGLE_APPLICATION_CREDENTIALS is not set"
	if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
		adc = fmt.Sprintf("GOOGLE_APPLICATION_CREDENTIALS names %s", f)
	}
	return fmt.Sprintf("The provider looked for credentials, in order, in: access_token and credentials (not set), "+
		"the GOOGLE_OAUTH_ACCESS_TOKEN and GOOGLE_CREDENTIALS environment variables (not set), and Application Default "+
		"Credentials (%s; then gcloud's file from `gcloud auth application-default login`; then the metadata server of "+
		"Google Cloud), which failed: %v\n\nSet credentials or access_token, run gcloud auth application-default login, or, "+
		"for a Spanner emulator, set emulator_host.", adc, err)
}

// staticToken is an access token used as is, never refreshed.
type staticToken string

func (t staticToken) Token(context.Context) (*auth.Token, error) {
	return &auth.Token{Value: string(t), Type: "Bearer"}, nil
}
