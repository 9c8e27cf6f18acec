//! The fused flash attention: the shape of a mapping ([`geometry`]), its candidates, screen
//! and selection ([`plan`]), its items, merges and homes over the tiles ([`layout`]), the tile
//! programs of its items and merges ([`programs`]), their cycle model ([`model`]), and its
//! lowering into homes ([`homes`]), distribution, scores and merge ([`lower`]).

pub mod geometry;
pub mod homes;
pub mod layout;
pub mod lower;
pub mod model;
pub mod plan;
pub mod programs;
