package pgidem

import (
	"net/http"
	"strconv"
	"strings"
)

// parseKey reads an Idempotency-Key header value: the bare form (visible ASCII without '"') or
// a Structured Field string ('"'-quoted, printable ASCII, escapes \" and \\ only). ok is false
// for an empty, malformed or too long key.
func parseKey(header string) (key string, ok bool) {
	v := strings.Trim(header, " \t")
	var b strings.Builder
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", false
		}
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			switch {
			case c == '\\':
				if i+1 >= len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", false
				}
				i++
				b.WriteByte(inner[i])
			case c == '"' || c < 0x20 || c > 0x7e:
				return "", false
			default:
				b.WriteByte(c)
			}
		}
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e || c == '"' {
				return "", false
			}
		}
		b.WriteString(v)
	}
	key = b.String()
	// every byte is ASCII here, so bytes are characters
	if key == "" || len(key) > contract.Defaults.MaxKeyLength {
		return "", false
	}
	return key, true
}

func unreserved(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func reserved(c byte) bool {
	return strings.IndexByte(":/?#[]@!$&'()*+,;=", c) >= 0
}

func fromHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const upperHex = "0123456789ABCDEF"

// normalizePart applies RFC 3986 §6.2.2 to a path or a query string, as octets.
func normalizePart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 < len(s) {
				hi, ok1 := fromHex(s[i+1])
				lo, ok2 := fromHex(s[i+2])
				if ok1 && ok2 {
					v := hi<<4 | lo
					if unreserved(v) {
						b.WriteByte(v)
					} else {
						b.WriteByte('%')
						b.WriteByte(upperHex[v>>4])
						b.WriteByte(upperHex[v&15])
					}
					i += 2
					continue
				}
			}
			b.WriteString("%25")
			continue
		}
		if unreserved(c) || reserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
	return b.String()
}

// normalizeTarget normalises a request target (path, then '?' and the query when it is not empty).
func normalizeTarget(received string) string {
	path, query, _ := strings.Cut(received, "?")
	target := normalizePart(path)
	if query != "" {
		target += "?" + normalizePart(query)
	}
	return target
}

// requestTarget is the target the client sent: the request line's own bytes (RequestURI), which
// routers and http.StripPrefix leave alone; a request built in process has only its URL.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return normalizeTarget(r.RequestURI)
	}
	raw := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		raw += "?" + r.URL.RawQuery
	}
	return normalizeTarget(raw)
}

// versionAtLeast compares MAJOR.MINOR.PATCH as three integers; anything else is too old.
func versionAtLeast(installed, min string) bool {
	parse := func(v string) ([3]int, bool) {
		var out [3]int
		parts := strings.Split(v, ".")
		if len(parts) != 3 {
			return out, false
		}
		for i, p := range parts {
			if p == "" || strings.Trim(p, "0123456789") != "" {
				return out, false
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				return out, false
			}
			out[i] = n
		}
		return out, true
	}
	have, ok := parse(installed)
	want, _ := parse(min)
	if !ok {
		return false
	}
	for i := range have {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

// quoteIdent quotes a schema name as PostgreSQL's quote_ident does.
func quoteIdent(name string) string {
	plain := name != ""
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// textArray writes a text[] literal, so that no driver's array type is needed.
func textArray(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		s = strings.ReplaceAll(s, `\`, `\\`)
		quoted[i] = `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
	}
	return "{" + strings.Join(quoted, ",") + "}"
}
