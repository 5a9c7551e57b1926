package guardian

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxResponseBytes bounds what is read from a Guardian endpoint.
const maxResponseBytes = 1 << 20

// checkEndpoint accepts only absolute http(s) URLs without credentials.
func checkEndpoint(key, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", key, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: scheme %q is not http or https", key, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%s: missing host in %q", key, u.Redacted())
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials in the URL are not allowed; use guardian.api_key_env", key)
	}
	return u, nil
}

// postJSON sends body as JSON and returns the response body of a 2xx answer.
// Non-2xx, transport errors and timeouts are errors that never include the
// request's headers.
func postJSON(ctx context.Context, client *http.Client, endpoint string, body any, bearer string) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("guardian endpoint: %w", ctx.Err())
		}
		return nil, fmt.Errorf("guardian endpoint: transport error: %v", redactURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("guardian endpoint: %w", ctx.Err())
		}
		return nil, fmt.Errorf("guardian endpoint: reading the answer: %v", err)
	}
	if len(data) > maxResponseBytes {
		return nil, fmt.Errorf("guardian endpoint: answer exceeds %d bytes", maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("guardian endpoint answered HTTP %d", resp.StatusCode)
	}
	return data, nil
}

// redactURLError drops the query string from *url.Error messages.
func redactURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery = ""
			return &url.Error{Op: ue.Op, URL: u.Redacted(), Err: ue.Err}
		}
	}
	return err
}

// WebhookOptions tunes the webhook backend.
type WebhookOptions struct {
	Timeout time.Duration
	Client  *http.Client // nil → a direct client (no proxy variables)
}

// WebhookSchema names the webhook payload's format.
const WebhookSchema = "netproxy.guardian.review/v1"

// WebhookPayload is the JSON body the webhook backend POSTs: the request's
// fields (each cut to its cap, typed as in ReviewRequest) at the top level,
// plus the schema name, the fields that were cut, and the names of the
// fields whose text the agent under review controls — a receiver must treat
// those as data, never as instructions (docs/guardian.md).
type WebhookPayload struct {
	Schema string `json:"schema"`
	ReviewRequest
	Truncated       []string `json:"truncated"`
	UntrustedFields []string `json:"untrusted_fields"`
}

// UntrustedFields returns the request fields whose text the agent under
// review wrote or influenced (a fresh slice each call).
func UntrustedFields() []string {
	return []string{"session_id", "environment_id", "execution_id", "host", "target", "command", "cwd", "sandbox_permissions", "reason", "justification"}
}

// NewWebhookPayload bounds req and wraps it.
func NewWebhookPayload(req ReviewRequest) WebhookPayload {
	b := Bound(req)
	tr := b.Truncated
	if tr == nil {
		tr = []string{}
	}
	if b.Command == nil {
		b.Command = []string{}
	}
	return WebhookPayload{Schema: WebhookSchema, ReviewRequest: b.ReviewRequest, Truncated: tr, UntrustedFields: UntrustedFields()}
}

// Webhook POSTs a WebhookPayload and expects exactly one verdict object
// {"decision","rationale","risk"} in a 2xx answer.
type Webhook struct {
	url    string
	client *http.Client
	opts   WebhookOptions
}

// NewWebhook checks the URL and builds the backend.
func NewWebhook(endpoint string, opts WebhookOptions) (*Webhook, error) {
	if _, err := checkEndpoint("guardian.url", endpoint); err != nil {
		return nil, err
	}
	c := opts.Client
	if c == nil {
		c = directClient()
	}
	return &Webhook{url: endpoint, client: c, opts: opts}, nil
}

func (w *Webhook) Review(ctx context.Context, req ReviewRequest) (Verdict, error) {
	ctx, cancel := withTimeout(ctx, w.opts.Timeout)
	defer cancel()
	data, err := postJSON(ctx, w.client, w.url, NewWebhookPayload(req), "")
	if err != nil {
		return Verdict{}, err
	}
	return ParseVerdict(data)
}

// OpenAIOptions configures the chat-completions backend.
type OpenAIOptions struct {
	BaseURL string // e.g. https://api.openai.com/v1 ; /chat/completions is appended
	Model   string
	APIKey  string // sent as a bearer token; never logged
	Timeout time.Duration
	Client  *http.Client
}

// OpenAI asks an OpenAI-compatible chat-completions endpoint for a JSON
// verdict.
type OpenAI struct {
	endpoint string
	client   *http.Client
	opts     OpenAIOptions
}

// NewOpenAI checks the base URL and builds the backend.
func NewOpenAI(opts OpenAIOptions) (*OpenAI, error) {
	u, err := checkEndpoint("guardian.url", opts.BaseURL)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/chat/completions") {
		u.Path += "/chat/completions"
	}
	c := opts.Client
	if c == nil {
		c = directClient()
	}
	return &OpenAI{endpoint: u.String(), client: c, opts: opts}, nil
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model          string            `json:"model"`
	Messages       []chatMessage     `json:"messages"`
	Temperature    float64           `json:"temperature"`
	ResponseFormat map[string]string `json:"response_format,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func (o *OpenAI) Review(ctx context.Context, req ReviewRequest) (Verdict, error) {
	ctx, cancel := withTimeout(ctx, o.opts.Timeout)
	defer cancel()
	body := chatRequest{
		Model: o.opts.Model,
		Messages: []chatMessage{
			{Role: "system", Content: SystemPrompt},
			{Role: "user", Content: Prompt(req)},
		},
		Temperature:    0,
		ResponseFormat: map[string]string{"type": "json_object"},
	}
	data, err := postJSON(ctx, o.client, o.endpoint, body, o.opts.APIKey)
	if err != nil {
		return Verdict{}, err
	}
	return parseChatResponse(data)
}

// parseChatResponse extracts the verdict from the one choice's
// message.content, and the token usage when the endpoint reports it. More
// than one choice is refused: the reviewer must give one answer.
func parseChatResponse(data []byte) (Verdict, error) {
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return Verdict{}, fmt.Errorf("%w: chat-completions answer is not JSON: %v", ErrNoVerdict, err)
	}
	if len(cr.Choices) != 1 || cr.Choices[0].Message.Content == nil {
		return Verdict{}, fmt.Errorf("%w: chat-completions answer must have exactly one choice with message.content (got %d choices)", ErrNoVerdict, len(cr.Choices))
	}
	v, err := ExtractVerdict(*cr.Choices[0].Message.Content)
	if err != nil {
		return Verdict{}, err
	}
	if cr.Usage != nil {
		v.Usage = Usage{PromptTokens: max(cr.Usage.PromptTokens, 0), CompletionTokens: max(cr.Usage.CompletionTokens, 0)}
	}
	return v, nil
}
