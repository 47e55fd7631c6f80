//! Source-IP allowlists per provider: defence in depth beside the signatures. Off unless
//! `PAYHOOK_{PROVIDER}_SOURCE_IPS` lists addresses or CIDR blocks. The source is the one API
//! Gateway saw (`requestContext.http.sourceIp`), never a header a caller can write; a request
//! without that context (`payhook serve`) has no known source and is refused while a list is set.
//! A refused request writes nothing and answers 403.

use std::net::IpAddr;

use axum::body::Body;
use axum::http::Request;
use lambda_http::request::RequestContext;

/// The addresses a provider's webhooks may come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceAllowlist {
    blocks: Vec<(IpAddr, u8)>,
}

impl SourceAllowlist {
    /// Addresses and CIDR blocks (`52.31.139.75`, `3.18.12.0/22`, `2001:db8::/32`), separated by
    /// spaces or commas. `None` for a blank list (the check is off).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        let blocks = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .map(block)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((!blocks.is_empty()).then_some(SourceAllowlist { blocks }))
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        self.blocks
            .iter()
            .any(|(net, bits)| within(ip, *net, *bits))
    }
}

fn block(text: &str) -> Result<(IpAddr, u8), String> {
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address or CIDR block"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        Some(b) => b
            .parse::<u8>()
            .ok()
            .filter(|b| *b <= max)
            .ok_or_else(|| format!("{text:?} has a prefix length over {max}"))?,
    };
    Ok((ip, bits))
}

fn within(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let (ip, net, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        // An IPv4 client seen as IPv4-mapped IPv6 is still itself.
        (IpAddr::V6(a), IpAddr::V4(_)) => match a.to_ipv4_mapped() {
            Some(v4) => return within(IpAddr::V4(v4), net, bits),
            None => return false,
        },
        (IpAddr::V4(_), IpAddr::V6(_)) => return false,
    };
    let shift = width - u32::from(bits);
    let mask = if shift >= 128 { 0 } else { u128::MAX << shift };
    let mask = if width == 32 {
        mask & u128::from(u32::MAX)
    } else {
        mask
    };
    ip & mask == net & mask
}

/// The client address API Gateway saw, if the request came through it.
pub fn source_ip(req: &Request<Body>) -> Option<IpAddr> {
    let Some(RequestContext::ApiGatewayV2(ctx)) = req.extensions().get::<RequestContext>() else {
        return None;
    };
    ctx.http.source_ip.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn addresses_and_blocks_of_both_families_match_exactly() -> Result<(), String> {
        let list =
            SourceAllowlist::parse("52.31.139.75, 3.18.12.0/22 2001:db8::/32")?.ok_or("a list")?;
        assert!(list.allows(ip("52.31.139.75")));
        assert!(!list.allows(ip("52.31.139.76")));
        assert!(list.allows(ip("3.18.15.255")) && !list.allows(ip("3.18.16.0")));
        assert!(list.allows(ip("2001:db8:ffff::1")) && !list.allows(ip("2001:db9::1")));
        assert!(list.allows(ip("::ffff:52.31.139.75")), "IPv4-mapped");
        assert_eq!(SourceAllowlist::parse("  ,  ")?, None, "blank: off");
        let all = SourceAllowlist::parse("0.0.0.0/0")?.ok_or("a list")?;
        assert!(all.allows(ip("8.8.8.8")) && !all.allows(ip("::1")));
        for bad in ["52.31.139", "10.0.0.0/33", "::/129", "host.example"] {
            assert!(SourceAllowlist::parse(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
