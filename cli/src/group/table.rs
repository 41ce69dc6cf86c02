//! Aligned text tables for the group commands' output.

/// Rows aligned under `headers`, columns separated by two spaces (the last not padded).
pub(super) fn render_table(headers: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            s.push_str(cell);
            if i < last {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count());
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s
    };
    let mut out = vec![line(&mut headers.iter().copied())];
    for row in rows {
        out.push(line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["orders".to_string(), "0".to_string(), "x".to_string()],
            vec!["t".to_string(), "12".to_string(), "yy".to_string()],
        ];
        assert_eq!(
            render_table(&["TOPIC", "P", "Z"], &rows),
            vec!["TOPIC   P   Z", "orders  0   x", "t       12  yy"]
        );
    }
}
