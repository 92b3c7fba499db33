package pgidem

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"
)

// envelope builds the stored response_body (`"http": 2`): the allow-listed headers by
// lower-cased name, each with its values in the order the response had them, and the body.
func envelope(stored []string, header http.Header, body []byte) ([]byte, error) {
	headers := map[string][]string{}
	for name, values := range header {
		lower := strings.ToLower(name)
		if !contains(stored, lower) || neverStored(lower) {
			continue
		}
		headers[lower] = append(headers[lower], values...)
	}
	env := map[string]interface{}{"http": 2, "headers": headers}
	if utf8.Valid(body) && bytes.IndexByte(body, 0) < 0 {
		env["body"] = string(body)
	} else {
		env["body_base64"] = base64.StdEncoding.EncodeToString(body)
	}
	return json.Marshal(env)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// storedHeader is one header line of a replay.
type storedHeader struct{ name, value string }

// replay decodes a stored response_body (jsonb text, or NULL) into its header lines, in the
// order the text has them, and its body. A body that is not an envelope replays as its text.
func replay(responseBody *string) ([]storedHeader, []byte, error) {
	if responseBody == nil {
		return nil, nil, nil
	}
	text := *responseBody
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &probe) != nil || probe["http"] == nil {
		return []storedHeader{{"content-type", "application/json"}}, []byte(text), nil
	}
	var version int
	if err := json.Unmarshal(probe["http"], &version); err != nil || (version != 1 && version != 2) {
		return nil, nil, errors.New("pgidem: stored envelope of an unknown http version")
	}
	var lines []storedHeader
	if raw := probe["headers"]; raw != nil {
		var err error
		if lines, err = orderedHeaders(raw, version); err != nil {
			return nil, nil, err
		}
	}
	var body []byte
	if raw, ok := probe["body_base64"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, err
		}
		var err error
		if body, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, nil, err
		}
	} else if raw, ok := probe["body"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, err
		}
		body = []byte(s)
	}
	return lines, body, nil
}

// orderedHeaders reads the envelope's headers object keeping its names' order (a Go map would
// lose it): http 2 holds an array of values per name, http 1 one string.
func orderedHeaders(raw json.RawMessage, version int) ([]storedHeader, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("pgidem: stored headers are not an object")
	}
	var lines []storedHeader
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := strings.ToLower(tok.(string))
		var values []string
		if version == 1 {
			var v string
			err = dec.Decode(&v)
			values = []string{v}
		} else {
			err = dec.Decode(&values)
		}
		if err != nil {
			return nil, err
		}
		if neverStored(name) {
			continue
		}
		for _, v := range values {
			lines = append(lines, storedHeader{name, v})
		}
	}
	return lines, nil
}
