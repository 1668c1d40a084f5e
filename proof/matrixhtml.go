package proof

import (
	"html/template"
	"io"

	"github.com/opensubstrate/sandbox/tier"
)

// The page is self-contained: inline CSS, no script, no external
// resource (its Content-Security-Policy forbids any), every string of a
// cell escaped by html/template in its context: a cell is hostile input.
var matrixPage = template.Must(template.New("matrix").Funcs(template.FuncMap{
	"label": Label,
	"why":   func(tr TierResult) string { return Clean(Why(tr), 0) },
	"short": func(tr TierResult) string { return Clean(Why(tr), 120) },
	"clean": func(s string) string { return Clean(s, 0) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>Proof matrix</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #111; }
table { border-collapse: collapse; }
th, td { border: 1px solid #999; padding: .35em .5em; vertical-align: top; max-width: 14em; }
th.target { text-align: left; font-weight: normal; }
th.target b { display: block; }
td small, th small { display: block; font-size: 11px; color: #333; overflow-wrap: anywhere; }
td.green { background: #d9f2d9; }
td.red { background: #c00; color: #fff; font-weight: bold; outline: 3px solid #600; }
td.red small { color: #fff; }
td.unavailable { background: #eee; color: #555; }
td.missing, td.unknown { background: #fff3cd; }
</style>
</head>
<body>
<h1>Proof matrix</h1>
<p id="summary">{{len .Rows}} targets, {{.Entries}} cells. Each row is a target's latest cell.</p>
<table id="matrix">
<thead><tr><th>target</th>{{range .Tiers}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>
<th class="target" scope="row"><b>{{clean .Key}}</b><small>{{.Summary}}; cgroup {{clean .Target.Cgroup}}, VM {{clean .Target.VM}}, Landlock ABI {{.Target.Landlock}}{{if .Latest.Substrate.Version}}; sandbox {{clean .Latest.Substrate.Version}}{{end}}{{if .Latest.Ended}}; ended {{clean .Latest.Ended}}{{end}}</small></th>
{{range .Tiers}}<td class="{{.Class}}" title="{{why .TierResult}}">{{label .State}}<small>{{short .TierResult}}</small></td>
{{end}}</tr>
{{end}}</tbody>
</table>
</body>
</html>
`))

type htmlTier struct {
	TierResult
	Class string
}

type htmlRow struct {
	Row
	Summary string
	Tiers   []htmlTier
}

// HTML writes the matrix as one self-contained page: green, red and
// unavailable cells coloured (red stands out), each with its reason in
// small text and in its title.
func (m Matrix) HTML(w io.Writer) error {
	data := struct {
		Rows    []htmlRow
		Entries int
		Tiers   []tier.Tier
	}{Entries: m.Entries, Tiers: tier.All}
	for _, r := range m.Rows {
		hr := htmlRow{Row: r, Summary: r.summary()}
		for _, tr := range r.Tiers {
			class := "unknown"
			switch tr.State {
			case Green, Red, Unavailable, Missing:
				class = string(tr.State)
			}
			hr.Tiers = append(hr.Tiers, htmlTier{TierResult: tr, Class: class})
		}
		data.Rows = append(data.Rows, hr)
	}
	return matrixPage.Execute(w, data)
}
