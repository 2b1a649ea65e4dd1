//! `kerf top`'s terminal screen, drawn with ratatui from a [`Frame`]: the cluster line, the
//! NodePools, the node list (the selected row highlighted), the selected node's reason and pods
//! when opened, the pending pods and the CapacityBuffers, and a line of keys. Every word and
//! number comes from `text`'s cells, so the screen and `--once` agree.

use ratatui::Frame as Screen;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};

use super::text;
use super::view::{Frame, State};

/// What the screen shows besides the frame.
pub struct Chrome<'a> {
    pub resources: &'a [String],
    /// The row under the cursor.
    pub cursor: usize,
    /// The selected node's pane is open.
    pub detail: bool,
    /// The filter being typed, if any.
    pub typing: Option<&'a str>,
    pub filter: &'a str,
    /// Watches not listed yet, or failing.
    pub status: String,
}

fn state_style(s: State) -> Style {
    match s {
        State::Ready => Style::default().fg(Color::Green),
        State::NotReady => Style::default().fg(Color::Red),
        State::Cordoned | State::Disrupting | State::Deleting => Style::default().fg(Color::Yellow),
        State::Launching => Style::default().fg(Color::Cyan),
    }
}

fn widths(header: &[String], rows: &[Vec<String>]) -> Vec<Constraint> {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in w.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    w.into_iter().map(|w| Constraint::Length(w as u16)).collect()
}

fn header_row(h: &[String]) -> Row<'static> {
    Row::new(h.iter().cloned().map(Cell::from).collect::<Vec<_>>()).style(Style::default().add_modifier(Modifier::BOLD))
}

/// Draws one screen.
pub fn draw(screen: &mut Screen<'_>, frame: &Frame, chrome: &Chrome<'_>) {
    let area = screen.area();
    let top_lines = 2 + frame.cluster.resources.len() as u16;
    let pools = if frame.node_pools.is_empty() { 0 } else { (frame.node_pools.len() as u16 + 1).min(6) };
    let bottom_items = frame.pending.len().max(1) + if frame.buffers.is_empty() { 0 } else { frame.buffers.len() + 1 };
    let bottom = (bottom_items as u16 + 2).min(area.height / 4).max(3);
    let detail = if chrome.detail && frame.selected.is_some() { (area.height / 3).max(6) } else { 0 };
    let [head, pool_area, nodes_area, detail_area, bottom_area, keys] = Layout::vertical([
        Constraint::Length(top_lines),
        Constraint::Length(pools),
        Constraint::Min(4),
        Constraint::Length(detail),
        Constraint::Length(bottom),
        Constraint::Length(1),
    ])
    .areas(area);

    let mut head_lines = vec![Line::from(vec![
        Span::styled("kerf top  ", Style::default().add_modifier(Modifier::BOLD)),
        Span::raw(text::cluster_summary(&frame.cluster)),
    ])];
    head_lines.extend(frame.cluster.resources.iter().map(|u| Line::raw(text::cluster_resource(u))));
    if !chrome.status.is_empty() {
        head_lines.push(Line::styled(chrome.status.clone(), Style::default().fg(Color::Yellow)));
    }
    screen.render_widget(Paragraph::new(head_lines), head);

    if pools > 0 {
        let header = text::pool_header(chrome.resources);
        let rows: Vec<Vec<String>> =
            frame.node_pools.iter().map(|p| text::pool_cells(p, chrome.resources.len())).collect();
        let table = Table::new(rows.iter().cloned().map(Row::new), widths(&header, &rows)).header(header_row(&header));
        screen.render_widget(table, pool_area);
    }

    nodes(screen, nodes_area, frame, chrome);
    if detail > 0 {
        selected(screen, detail_area, frame, chrome);
    }
    pending(screen, bottom_area, frame);

    let keys_text = match chrome.typing {
        Some(t) => format!("filter: {t}_   (enter: apply, esc: cancel)"),
        None => format!(
            "q quit  up/down select  enter pods & reason  s sort ({})  r reverse  / filter{}",
            frame.sort,
            if chrome.filter.is_empty() { String::new() } else { format!(" [{}]", chrome.filter) }
        ),
    };
    screen.render_widget(
        Paragraph::new(Line::styled(keys_text, Style::default().add_modifier(Modifier::REVERSED))),
        keys,
    );
}

fn nodes(screen: &mut Screen<'_>, area: Rect, frame: &Frame, chrome: &Chrome<'_>) {
    let header = text::node_header(chrome.resources);
    // Only the rows around the cursor are turned into cells: 2,000 nodes, a screenful drawn.
    let visible = area.height.saturating_sub(2) as usize;
    let first = chrome.cursor.saturating_sub(visible.saturating_sub(1));
    let shown = &frame.nodes[first.min(frame.nodes.len())..(first + visible).min(frame.nodes.len())];
    let rows: Vec<Vec<String>> = shown.iter().map(text::node_cells).collect();
    let state_col = header.len() - 1;
    let table_rows = rows.iter().zip(shown).map(|(cells, r)| {
        Row::new(cells.iter().enumerate().map(|(i, c)| {
            let cell = Cell::from(c.clone());
            if i == state_col { cell.style(state_style(r.state)) } else { cell }
        }))
    });
    let title = format!(" nodes: {} shown, sorted by {} ", frame.nodes.len(), frame.sort);
    let table = Table::new(table_rows, widths(&header, &rows))
        .header(header_row(&header))
        .block(Block::default().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    let mut state = TableState::default();
    if !shown.is_empty() {
        state.select(Some(chrome.cursor.saturating_sub(first).min(shown.len() - 1)));
    }
    screen.render_stateful_widget(table, area, &mut state);
}

fn selected(screen: &mut Screen<'_>, area: Rect, frame: &Frame, chrome: &Chrome<'_>) {
    let Some(d) = &frame.selected else { return };
    let r = &d.node;
    let mut lines = vec![Line::from(vec![
        Span::styled(r.state.as_str(), state_style(r.state)),
        Span::raw(format!(
            "  {}  claim {}  provider {}",
            r.name,
            r.node_claim.as_deref().unwrap_or("-"),
            d.provider_id.as_deref().unwrap_or("-")
        )),
    ])];
    let why = match (r.state, &r.reason) {
        (State::Disrupting | State::Deleting, Some(w)) => format!("removing it: {w}"),
        (_, Some(w)) => format!("kept: {w}"),
        (_, None) => "no reason recorded by kerf".to_string(),
    };
    lines.push(Line::styled(why, Style::default().add_modifier(Modifier::BOLD)));
    lines.push(Line::raw(text::price_detail(r)));
    if let Some(rev) = &r.reversal {
        lines.push(Line::styled(rev.clone(), Style::default().fg(Color::Yellow)));
    }
    lines.push(Line::raw(format!("{} pods:", d.pods.len())));
    for p in &d.pods {
        let req: Vec<String> =
            p.requests.iter().map(|u| format!("{} {}", u.resource, text::amount(&u.resource, u.used))).collect();
        lines.push(Line::raw(format!(
            "  {}/{}  {}  {}  {}",
            p.namespace,
            p.name,
            p.phase,
            p.owner.as_deref().unwrap_or("-"),
            req.join(" ")
        )));
    }
    let block = Block::default().borders(Borders::TOP).title(format!(" node {} (esc closes) ", r.name));
    let _ = chrome;
    screen.render_widget(Paragraph::new(lines).block(block).wrap(Wrap { trim: false }), area);
}

fn pending(screen: &mut Screen<'_>, area: Rect, frame: &Frame) {
    let total: usize = frame.pending.iter().map(|g| g.pods).sum();
    let mut lines: Vec<Line<'_>> = if frame.pending.is_empty() {
        vec![Line::raw("  none")]
    } else {
        frame.pending.iter().map(|g| Line::raw(text::pending_line(g))).collect()
    };
    if !frame.buffers.is_empty() {
        lines.push(Line::styled("capacity buffers:", Style::default().add_modifier(Modifier::BOLD)));
        lines.extend(frame.buffers.iter().map(|b| Line::raw(format!("  {}", text::buffer_line(b)))));
    }
    let block = Block::default().borders(Borders::TOP).title(format!(" pending pods: {total}, by owner "));
    screen.render_widget(Paragraph::new(lines).block(block), area);
}
