//! A renderer for the subset of Helm's templates (Go text/template with a few Sprig functions)
//! that charts/kerf uses, so the chart is rendered and checked here, where no `helm` binary can
//! be installed. Anything outside the subset is an error naming the file and the action, never
//! skipped: a chart change that needs more makes the test fail until this grows with it.
//!
//! Supported: `{{ }}` with `-` trimming and `/* */` comments; `define`, `if` / `else`, `with`,
//! `range` over lists, `end`; `.`, `$`, field chains (`.Values.a.b`, `$.Release.Name`), string
//! and integer literals, parentheses, pipelines; the functions `include`, `default`, `trunc`,
//! `trimSuffix`, `printf` (`%s` only), `replace`, `toYaml`, `toString`, `nindent`, `indent`,
//! `quote`, `eq`, `gt`, `int`, `not`, `and`, `or`.

use std::collections::BTreeMap;

use serde_json::Value;

/// A parsed template: text and actions in a tree.
#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Output(Expr),
    If(Expr, Vec<Node>, Vec<Node>),
    With(Expr, Vec<Node>, Vec<Node>),
    Range(Expr, Vec<Node>),
}

#[derive(Debug, Clone)]
enum Expr {
    /// A pipeline: commands joined by `|`, each one's result the last argument of the next.
    Pipeline(Vec<Vec<Expr>>),
    /// A field chain from `.` (`root` false) or `$` (`root` true).
    Field {
        root: bool,
        path: Vec<String>,
    },
    Str(String),
    Int(i64),
    Ident(String),
}

/// The chart's templates, parsed, with their named templates (`define`).
#[derive(Debug)]
pub struct Chart {
    files: Vec<(String, Vec<Node>)>,
    defines: BTreeMap<String, Vec<Node>>,
}

/// Splits template text into text and action tokens, applying `{{-` / `-}}` trimming.
fn lex(file: &str, src: &str) -> Result<Vec<(bool, String)>, String> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or_else(|| format!("{file}: unclosed action"))?;
        let mut action = &after[..close];
        if let Some(a) = action.strip_prefix('-') {
            text = text.trim_end().to_string();
            action = a;
        }
        trim_next = false;
        if let Some(a) = action.strip_suffix('-') {
            trim_next = true;
            action = a;
        }
        out.push((false, text));
        out.push((true, action.trim().to_string()));
        rest = &after[close + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    out.push((false, text.to_string()));
    Ok(out)
}

fn tokenize(file: &str, action: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = action.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            let mut s = String::from('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    s.push(chars[i]);
                    i += 1;
                }
                s.push(chars[i]);
                i += 1;
            }
            if i == chars.len() {
                return Err(format!("{file}: unterminated string in {{{{ {action} }}}}"));
            }
            s.push('"');
            tokens.push(s);
            i += 1;
        } else if "()|".contains(c) {
            tokens.push(c.to_string());
            i += 1;
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !"()|\"".contains(chars[i]) {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        }
    }
    Ok(tokens)
}

fn parse_expr(file: &str, tokens: &[String], pos: &mut usize) -> Result<Expr, String> {
    let mut commands = vec![Vec::new()];
    while *pos < tokens.len() {
        let t = &tokens[*pos];
        *pos += 1;
        let operand = match t.as_str() {
            ")" => break,
            "|" => {
                commands.push(Vec::new());
                continue;
            }
            "(" => parse_expr(file, tokens, pos)?,
            "." => Expr::Field { root: false, path: Vec::new() },
            "$" => Expr::Field { root: true, path: Vec::new() },
            s if s.starts_with('"') => {
                Expr::Str(serde_json::from_str::<String>(s).map_err(|e| format!("{file}: string {s}: {e}"))?)
            }
            s if s.starts_with('.') => {
                Expr::Field { root: false, path: s[1..].split('.').map(str::to_string).collect() }
            }
            s if s.starts_with("$.") => {
                Expr::Field { root: true, path: s[2..].split('.').map(str::to_string).collect() }
            }
            s if s.parse::<i64>().is_ok() => Expr::Int(s.parse().unwrap_or_default()),
            s if s.chars().all(|c| c.is_ascii_alphanumeric()) => Expr::Ident(s.to_string()),
            s => return Err(format!("{file}: unsupported token {s:?}")),
        };
        if let Some(last) = commands.last_mut() {
            last.push(operand);
        }
    }
    if commands.iter().any(Vec::is_empty) {
        return Err(format!("{file}: empty command in {tokens:?}"));
    }
    Ok(Expr::Pipeline(commands))
}

fn expr(file: &str, src: &str) -> Result<Expr, String> {
    let tokens = tokenize(file, src)?;
    let mut pos = 0;
    let e = parse_expr(file, &tokens, &mut pos)?;
    if pos != tokens.len() {
        return Err(format!("{file}: unbalanced parentheses in {{{{ {src} }}}}"));
    }
    Ok(e)
}

/// Where a block ended: `end`, or `else` (then the else branch follows).
enum Stop {
    End,
    Else,
    Eof,
}

fn parse_block(
    file: &str,
    tokens: &[(bool, String)],
    pos: &mut usize,
    defines: &mut BTreeMap<String, Vec<Node>>,
) -> Result<(Vec<Node>, Stop), String> {
    let mut nodes = Vec::new();
    while *pos < tokens.len() {
        let (is_action, body) = &tokens[*pos];
        *pos += 1;
        if !is_action {
            if !body.is_empty() {
                nodes.push(Node::Text(body.clone()));
            }
            continue;
        }
        if body.starts_with("/*") {
            if !body.ends_with("*/") {
                return Err(format!("{file}: unclosed comment"));
            }
            continue;
        }
        let (word, rest) = body.split_once(' ').unwrap_or((body.as_str(), ""));
        match word {
            "end" => return Ok((nodes, Stop::End)),
            "else" if rest.is_empty() => return Ok((nodes, Stop::Else)),
            "if" | "with" => {
                let cond = expr(file, rest)?;
                let (then, stop) = parse_block(file, tokens, pos, defines)?;
                let otherwise = match stop {
                    Stop::Else => match parse_block(file, tokens, pos, defines)? {
                        (nodes, Stop::End) => nodes,
                        _ => return Err(format!("{file}: `{word}` without `end`")),
                    },
                    Stop::End => Vec::new(),
                    Stop::Eof => return Err(format!("{file}: `{word}` without `end`")),
                };
                nodes.push(if word == "if" {
                    Node::If(cond, then, otherwise)
                } else {
                    Node::With(cond, then, otherwise)
                });
            }
            "range" => {
                let over = expr(file, rest)?;
                match parse_block(file, tokens, pos, defines)? {
                    (body, Stop::End) => nodes.push(Node::Range(over, body)),
                    _ => return Err(format!("{file}: `range` without `end` (or with `else`)")),
                }
            }
            "define" => {
                let name: String = serde_json::from_str(rest).map_err(|e| format!("{file}: define {rest}: {e}"))?;
                match parse_block(file, tokens, pos, defines)? {
                    (body, Stop::End) => {
                        defines.insert(name, body);
                    }
                    _ => return Err(format!("{file}: `define {rest}` without `end`")),
                }
            }
            "else" | "template" | "block" | "break" | "continue" => {
                return Err(format!("{file}: unsupported action {{{{ {body} }}}}"));
            }
            _ if body.contains(":=") || body.contains(" = ") => {
                return Err(format!("{file}: variables are not supported: {{{{ {body} }}}}"));
            }
            _ => nodes.push(Node::Output(expr(file, body)?)),
        }
    }
    Ok((nodes, Stop::Eof))
}

impl Chart {
    /// Parses the templates: `(file name, text)`, helpers (`_*.tpl`) included.
    pub fn parse(files: &[(String, String)]) -> Result<Chart, String> {
        let mut defines = BTreeMap::new();
        let mut parsed = Vec::new();
        for (name, text) in files {
            let tokens = lex(name, text)?;
            let mut pos = 0;
            match parse_block(name, &tokens, &mut pos, &mut defines)? {
                (nodes, Stop::Eof) => parsed.push((name.clone(), nodes)),
                _ => return Err(format!("{name}: `end` or `else` without a block")),
            }
        }
        Ok(Chart { files: parsed, defines })
    }

    /// Renders every template but the helpers with `root` (`{Values, Release, Chart}`) as `.`:
    /// `(file name, output)`.
    pub fn render(&self, root: &Value) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for (name, nodes) in &self.files {
            if name.rsplit('/').next().is_some_and(|f| f.starts_with('_')) {
                continue;
            }
            let mut text = String::new();
            self.exec(name, nodes, root, root, &mut text)?;
            out.push((name.clone(), text));
        }
        Ok(out)
    }

    fn exec(&self, file: &str, nodes: &[Node], dot: &Value, root: &Value, out: &mut String) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Text(t) => out.push_str(t),
                Node::Output(e) => out.push_str(&print(&self.eval(file, e, dot, root)?)),
                Node::If(cond, then, otherwise) => {
                    let branch = if truthy(&self.eval(file, cond, dot, root)?) { then } else { otherwise };
                    self.exec(file, branch, dot, root, out)?;
                }
                Node::With(e, then, otherwise) => {
                    let v = self.eval(file, e, dot, root)?;
                    if truthy(&v) {
                        self.exec(file, then, &v, root, out)?;
                    } else {
                        self.exec(file, otherwise, dot, root, out)?;
                    }
                }
                Node::Range(e, body) => match self.eval(file, e, dot, root)? {
                    Value::Array(items) => {
                        for item in &items {
                            self.exec(file, body, item, root, out)?;
                        }
                    }
                    Value::Null => {}
                    other => return Err(format!("{file}: range over {other} (only lists are supported)")),
                },
            }
        }
        Ok(())
    }

    fn eval(&self, file: &str, e: &Expr, dot: &Value, root: &Value) -> Result<Value, String> {
        match e {
            Expr::Str(s) => Ok(Value::String(s.clone())),
            Expr::Int(n) => Ok(Value::from(*n)),
            Expr::Field { root: from_root, path } => {
                let start = if *from_root { root } else { dot };
                Ok(path.iter().fold(start.clone(), |v, field| v.get(field).cloned().unwrap_or(Value::Null)))
            }
            Expr::Ident(name) => self.call(file, name, Vec::new(), dot, root),
            Expr::Pipeline(commands) => {
                let mut piped: Option<Value> = None;
                for command in commands {
                    let (head, args) = command.split_first().ok_or_else(|| format!("{file}: empty command"))?;
                    let result = match head {
                        Expr::Ident(name) => {
                            let mut values =
                                args.iter().map(|a| self.eval(file, a, dot, root)).collect::<Result<Vec<_>, _>>()?;
                            values.extend(piped.take());
                            self.call(file, name, values, dot, root)?
                        }
                        operand if args.is_empty() && piped.is_none() => self.eval(file, operand, dot, root)?,
                        _ => return Err(format!("{file}: arguments to a non-function in {e:?}")),
                    };
                    piped = Some(result);
                }
                Ok(piped.unwrap_or(Value::Null))
            }
        }
    }

    fn call(&self, file: &str, name: &str, args: Vec<Value>, _dot: &Value, _root: &Value) -> Result<Value, String> {
        let arity = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!("{file}: {name} takes {n} arguments, got {}", args.len()))
            }
        };
        let int = |v: &Value| -> Result<i64, String> {
            match v {
                Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).ok_or(format!("{file}: {n}")),
                Value::String(s) => s.parse().map_err(|_| format!("{file}: {name}: {s:?} is not an integer")),
                Value::Null => Ok(0),
                Value::Bool(b) => Ok(i64::from(*b)),
                other => Err(format!("{file}: {name}: {other} is not an integer")),
            }
        };
        let text = |v: &Value| print(v);
        Ok(match name {
            "include" => {
                arity(2)?;
                let template = args[0].as_str().ok_or(format!("{file}: include needs a template name"))?;
                let body = self.defines.get(template).ok_or(format!("{file}: no template {template:?}"))?;
                // Inside a named template, `.` and `$` are both the data it was given.
                let mut out = String::new();
                self.exec(file, body, &args[1], &args[1], &mut out)?;
                Value::String(out)
            }
            "default" => {
                arity(2)?;
                if truthy(&args[1]) { args[1].clone() } else { args[0].clone() }
            }
            "trunc" => {
                arity(2)?;
                let n = usize::try_from(int(&args[0])?).map_err(|e| format!("{file}: trunc: {e}"))?;
                Value::String(text(&args[1]).chars().take(n).collect())
            }
            "trimSuffix" => {
                arity(2)?;
                let s = text(&args[1]);
                Value::String(s.strip_suffix(text(&args[0]).as_str()).unwrap_or(&s).to_string())
            }
            "replace" => {
                arity(3)?;
                Value::String(text(&args[2]).replace(&text(&args[0]), &text(&args[1])))
            }
            "printf" => {
                let (format, rest) = args.split_first().ok_or(format!("{file}: printf needs a format"))?;
                let format = text(format);
                if format.matches('%').count() != format.matches("%s").count() {
                    return Err(format!("{file}: printf supports %s only: {format:?}"));
                }
                let pieces: Vec<&str> = format.split("%s").collect();
                if pieces.len() != rest.len() + 1 {
                    return Err(format!("{file}: printf {format:?} with {} arguments", rest.len()));
                }
                let mut s = pieces[0].to_string();
                for (arg, piece) in rest.iter().zip(&pieces[1..]) {
                    s.push_str(&text(arg));
                    s.push_str(piece);
                }
                Value::String(s)
            }
            "toYaml" => {
                arity(1)?;
                let yaml = serde_yaml_ng::to_string(&args[0]).map_err(|e| format!("{file}: toYaml: {e}"))?;
                Value::String(yaml.trim_end_matches('\n').to_string())
            }
            "toString" => {
                arity(1)?;
                Value::String(text(&args[0]))
            }
            "nindent" | "indent" => {
                arity(2)?;
                let pad = " ".repeat(usize::try_from(int(&args[0])?).map_err(|e| format!("{file}: {e}"))?);
                let body = format!("{pad}{}", text(&args[1]).replace('\n', &format!("\n{pad}")));
                Value::String(if name == "nindent" { format!("\n{body}") } else { body })
            }
            "quote" => {
                arity(1)?;
                Value::String(serde_json::to_string(&text(&args[0])).map_err(|e| format!("{file}: quote: {e}"))?)
            }
            "eq" => {
                arity(2)?;
                Value::Bool(args[0] == args[1])
            }
            "gt" => {
                arity(2)?;
                Value::Bool(int(&args[0])? > int(&args[1])?)
            }
            "int" => {
                arity(1)?;
                Value::from(int(&args[0])?)
            }
            "not" => {
                arity(1)?;
                Value::Bool(!truthy(&args[0]))
            }
            "and" => args.iter().find(|a| !truthy(a)).or(args.last()).cloned().unwrap_or(Value::Null),
            "or" => args.iter().find(|a| truthy(a)).or(args.last()).cloned().unwrap_or(Value::Null),
            other => return Err(format!("{file}: unsupported function {other:?}")),
        })
    }
}

/// Go's truth: false, 0, nil and empty strings, lists and maps are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A value as a template prints it (Helm prints a missing value as nothing).
fn print(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// Every `.Values.a.b` / `$.Values.a.b` chain in a template, as `["a", "b"]`.
pub fn values_references(text: &str) -> Vec<Vec<String>> {
    let mut refs = Vec::new();
    for (i, _) in text.match_indices(".Values.") {
        let rest = &text[i + ".Values.".len()..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_')).unwrap_or(rest.len());
        let chain: Vec<String> = rest[..end].split('.').filter(|s| !s.is_empty()).map(str::to_string).collect();
        if !chain.is_empty() {
            refs.push(chain);
        }
    }
    refs
}
